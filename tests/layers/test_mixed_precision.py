"""Mixed precision: float16 compute, float32 variables and KL terms."""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization


@pytest.fixture
def mixed_float16():
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy(previous)


@pytest.mark.parametrize("extra", [{}, {"prior": "scale_mixture", "bayesian_bias": True}],
                         ids=["analytic_kl", "mc_kl_bayesian_bias"])
def test_every_layer_trains_under_mixed_float16(mixed_float16, extra):
    rng = np.random.default_rng(0)
    x = rng.random((64, 6, 6, 2)).astype("float32")
    y = rng.integers(0, 3, 64)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), Conv2DFlipout(4, 3, seed=0, **extra),
        Conv2DReparameterization(4, 3, seed=1, **extra), keras.layers.Flatten(),
        DenseReparameterization(8, activation="relu", seed=2, **extra),
        DenseLocalReparameterization(8, seed=3, **extra), DenseFlipout(3, seed=4, **extra),
        keras.layers.Activation("linear", dtype="float32"),
    ])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=2, verbose=0, callbacks=[KLScheduler(64)])
    assert np.all(np.isfinite(history.history["loss"]))
    assert np.all(np.isfinite(history.history["kl"])) and history.history["kl"][0] > 0
    model(x[:2])
    bayesian = [layer for layer in model.layers if hasattr(layer, "kl_divergence")]
    assert len(bayesian) == 5
    for layer in bayesian:
        assert layer.compute_dtype == "float16"
        assert layer.kernel_params[0].dtype == "float32"
        assert layer.losses[0].dtype == "float32"  # the KL is computed in float32

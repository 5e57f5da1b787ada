"""XLA compilation for every layer, and seeded reproducibility of a training run."""

import keras
import numpy as np
import pytest

from tfp_bnn import set_mean_mode
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

DENSE = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]
CONV = [Conv2DReparameterization, Conv2DFlipout]


def _dense_model(cls, seed):
    return keras.Sequential([
        keras.Input((6,)),
        cls(16, activation="relu", seed=seed, prior="scale_mixture"),
        cls(2, seed=seed + 1, bayesian_bias=True),
    ])


def _conv_model(cls, seed):
    return keras.Sequential([
        keras.Input((8, 8, 2)),
        cls(4, 3, activation="relu", seed=seed),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(seed)),
    ])


def _data(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64,) + shape).astype("float32")
    return x, rng.integers(0, 2, size=64)


@pytest.mark.parametrize(
    "cls", DENSE + CONV, ids=lambda c: c.__name__
)
def test_fit_and_predict_with_jit_compile(cls):
    shape = (6,) if cls in DENSE else (8, 8, 2)
    x, y = _data(shape)
    model = (_dense_model if cls in DENSE else _conv_model)(cls, 0)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[KLScheduler(64)])
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["kl"][0] > 0
    set_mean_mode(model)
    a, b = model.predict(x, verbose=0), model.predict(x, verbose=0)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", DENSE + CONV, ids=lambda c: c.__name__)
def test_same_seed_gives_an_identical_training_run(cls):
    shape = (6,) if cls in DENSE else (8, 8, 2)
    x, y = _data(shape)
    runs = []
    for _ in range(2):
        model = (_dense_model if cls in DENSE else _conv_model)(cls, 7)
        model.compile(keras.optimizers.Adam(1e-2),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False,
                            callbacks=[KLScheduler(64)])
        runs.append((history.history, [w.numpy() for w in model.weights],
                     model.predict(x, verbose=0)))
    (h1, w1, p1), (h2, w2, p2) = runs
    assert h1 == h2
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(p1, p2)


def test_different_seeds_give_different_runs():
    x, y = _data((6,))
    outs = []
    for seed in (1, 2):
        model = _dense_model(DenseFlipout, seed)
        outs.append(model.predict(x, verbose=0))
    assert not np.allclose(outs[0], outs[1])

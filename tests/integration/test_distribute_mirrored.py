"""tf.distribute: two replicas on two logical CPUs count the KL once."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import set_mean_mode
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

N = 32


_STRATEGY = []


def _strategy():
    """One strategy for the module: TensorFlow's collective instance keys
    collide when several MirroredStrategy objects run collectives in one
    process."""
    if not _STRATEGY:
        devices = tf.config.list_logical_devices("CPU")
        if len(devices) < 2:
            pytest.skip("needs the two logical CPU devices set up in tests/conftest.py")
        _STRATEGY.append(tf.distribute.MirroredStrategy([d.name for d in devices[:2]]))
    return _STRATEGY[0]


def _build(cls):
    model = keras.Sequential([
        keras.Input((5,)), cls(8, activation="relu", seed=3, kl_weight=1 / N),
        cls(1, seed=4, kl_weight=1 / N),
    ])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(N, 5)).astype("float32"), rng.normal(size=(N, 1)).astype("float32")


def _one_step(model, x, y):
    history = model.fit(x, y, batch_size=N, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][0], [w.numpy() for w in model.trainable_weights]


def test_one_step_loss_and_update_match_single_device():
    """Reparameterization draws one kernel per step from the mirrored seed
    state, so both replicas and the single device use the same weights: the
    losses must agree to float rounding, and so must the updated weights.
    A KL counted once per replica would add KL/N to the 2-replica loss."""
    x, y = _data()
    single = _build(DenseReparameterization)
    initial = [w.numpy() for w in single.weights]
    with _strategy().scope():
        mirrored = _build(DenseReparameterization)
    mirrored.set_weights(initial)
    kl = sum(float(layer.kl_divergence()) for layer in single.layers) / N
    loss_1, weights_1 = _one_step(single, x, y)
    loss_2, weights_2 = _one_step(mirrored, x, y)
    assert kl > 1e-2  # large enough that double counting would show
    assert loss_2 == pytest.approx(loss_1, rel=1e-5)
    for a, b in zip(weights_1, weights_2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [DenseFlipout, DenseLocalReparameterization])
def test_evaluate_loss_in_mean_mode_matches_single_device(cls):
    """Noise per example differs across replicas for Flipout and local
    reparameterization, so compare a deterministic pass: mean mode plus the
    analytic KL, through the distributed test step."""
    x, y = _data()
    single = _build(cls)
    with _strategy().scope():
        mirrored = _build(cls)
    mirrored.set_weights(single.get_weights())
    set_mean_mode(single)
    set_mean_mode(mirrored)
    loss_1 = single.evaluate(x, y, batch_size=N, verbose=0, return_dict=True)["loss"]
    loss_2 = mirrored.evaluate(x, y, batch_size=N, verbose=0, return_dict=True)["loss"]
    kl = sum(float(layer.kl_divergence()) for layer in single.layers) / N
    data = float(np.mean((single.predict(x, verbose=0) - y) ** 2))
    assert loss_1 == pytest.approx(data + kl, rel=1e-5)
    assert loss_2 == pytest.approx(loss_1, rel=1e-5)


def test_fit_with_scheduler_under_mirrored_strategy():
    x = np.random.default_rng(1).normal(size=(64, 6, 6, 1)).astype("float32")
    y = np.random.default_rng(2).integers(0, 3, size=64)
    with _strategy().scope():
        model = keras.Sequential([
            keras.Input((6, 6, 1)), Conv2DFlipout(4, 3, activation="relu", seed=0),
            keras.layers.Flatten(), DenseFlipout(3, seed=1),
        ])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[KLScheduler(64)])
    h = history.history
    assert np.all(np.isfinite(h["loss"]))
    np.testing.assert_allclose(np.add(h["kl"], h["data_loss"]), h["loss"], rtol=1e-5)
    exact = sum(float(layer.kl_divergence()) for layer in model.layers
                if hasattr(layer, "kl_divergence")) / 64
    assert h["kl"][-1] == pytest.approx(exact, rel=0.05)

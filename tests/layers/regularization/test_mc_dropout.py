"""MCDropout: the mask, its rate, mean mode, seeds, serialization, fit, mixed precision."""

import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.gradients import value_and_gradients
import tfp_bnn
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import MCDropout

pytestmark = pytest.mark.jax

# Large enough that 5 binomial standard errors of the dropped fraction are
# ~0.005 at rate 0.3 (sqrt(0.3 * 0.7 / 200_000) = 1.02e-3).
_BIG = (400, 500)


def _inputs(shape, seed=0, dtype="float32"):
    # Bounded away from 0, so a zero output always means a dropped unit.
    return np.random.default_rng(seed).uniform(1.0, 2.0, size=shape).astype(dtype)


def _five_se(p, n):
    """5 binomial standard errors of a fraction estimated from n draws of Bernoulli(p)."""
    return 5.0 * math.sqrt(p * (1.0 - p) / n)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _kept_scale(rate, dtype="float32"):
    # The layer scales kept units by 1/(1 - rate), both factors rounded to dtype.
    return np.asarray(1.0, dtype) / np.asarray(1.0 - rate, dtype)


# --- the mask -----------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.3, 0.75])
@pytest.mark.parametrize("training", [False, True])
def test_every_output_is_zero_or_the_scaled_input(rate, training):
    x = _inputs((64, 32))
    out = _np(MCDropout(rate, seed=1)(x, training=training))
    kept = out != 0
    # Exact: inputs * mask / (1 - rate) with float32 arithmetic, nothing else.
    np.testing.assert_array_equal(out[kept], x[kept] * _kept_scale(rate))
    # Both outcomes occur (P(all 2048 units alike) < 0.75**2048).
    assert kept.any() and (~kept).any()
    if rate == 0.75:  # 1/(1 - rate) = 4 is exact: the scaled input is x / (1 - rate) itself
        np.testing.assert_array_equal(out[kept], x[kept] / np.float32(0.25))


@pytest.mark.parametrize("training", [False, True])
def test_dropped_fraction_matches_the_rate_and_masks_are_independent(training):
    rate, n = 0.3, _BIG[0] * _BIG[1]
    x = _inputs(_BIG)
    layer = MCDropout(rate, seed=2)
    first = _np(layer(x, training=training)) == 0
    second = _np(layer(x, training=training)) == 0
    tol = _five_se(rate, n)
    assert abs(first.mean() - rate) < tol
    assert abs(second.mean() - rate) < tol
    assert not np.array_equal(first, second)
    # Independent masks drop a unit twice with probability rate^2.
    assert abs((first & second).mean() - rate**2) < _five_se(rate**2, n)


def test_gradient_is_the_mask():
    rate = 0.4
    x = _inputs((32, 16))
    layer = MCDropout(rate, seed=3)
    layer.build(x.shape)
    # The same seed-generator state draws the same mask in both calls.
    state = [v.value for v in layer.non_trainable_variables]

    def call(inputs):
        return layer.stateless_call([], state, inputs, training=True)[0]

    _, (grad,) = value_and_gradients(lambda inputs: keras.ops.sum(call(inputs)), x)
    kept = _np(call(x)) != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_array_equal(grad, np.where(kept, _kept_scale(rate), 0.0))


def test_rate_zero_is_the_identity():
    x = _inputs((16, 8))
    layer = MCDropout(0.0, seed=4)
    for training in (False, True):
        np.testing.assert_array_equal(_np(layer(x, training=training)), x)


def test_noise_shape_shares_the_mask_along_the_none_free_axis():
    rate, (b, t, c) = 0.5, (200, 10, 16)
    x = _inputs((b, t, c))
    for noise_shape in [(None, 1, None), (None, 1, c)]:
        out = _np(MCDropout(rate, noise_shape=noise_shape, seed=5)(x))
        dropped = out == 0
        # One mask per (example, channel), repeated along the time axis.
        np.testing.assert_array_equal(dropped, np.broadcast_to(dropped[:, :1, :], dropped.shape))
        n = b * c
        assert abs(dropped[:, 0, :].mean() - rate) < _five_se(rate, n)
        kept = ~dropped
        np.testing.assert_array_equal(out[kept], x[kept] * _kept_scale(rate))


@pytest.mark.parametrize("noise_shape", [(None, 1), (None, 1, 1, 1)])
def test_noise_shape_of_the_wrong_rank_raises(noise_shape):
    layer = MCDropout(0.5, noise_shape=noise_shape)
    with pytest.raises(ValueError, match="noise_shape"):
        layer(_inputs((2, 3, 4)))


# --- mean mode ----------------------------------------------------------------------------


def _dropout_model(input_shape, **kwargs):
    return keras.Sequential([keras.Input(input_shape), MCDropout(**kwargs)])


def test_mean_mode_is_the_identity_at_inference_only():
    rate = 0.5
    x = _inputs((256, 64))
    model = _dropout_model((64,), rate=rate, seed=6)
    assert not tfp_bnn.is_mean_mode(model)
    assert tfp_bnn.set_mean_mode(model) == 1
    assert tfp_bnn.is_mean_mode(model)
    np.testing.assert_array_equal(_np(model(x)), x)
    np.testing.assert_array_equal(_np(model(x, training=False)), x)
    np.testing.assert_array_equal(model.predict(x, verbose=0), x)
    # Training drops even in mean mode.
    trained = _np(model(x, training=True)) == 0
    assert abs(trained.mean() - rate) < _five_se(rate, x.size)
    tfp_bnn.set_mean_mode(model, False)
    assert not tfp_bnn.is_mean_mode(model)
    assert (_np(model(x)) == 0).any()


def test_mean_mode_context_and_an_already_traced_predict():
    x = _inputs((128, 32))
    model = _dropout_model((32,), rate=0.5, seed=7)
    assert (model.predict(x, verbose=0) == 0).any()  # traced while sampling
    with tfp_bnn.mean_mode(model):
        assert tfp_bnn.is_mean_mode(model)
        np.testing.assert_array_equal(model.predict(x, verbose=0), x)
    assert not tfp_bnn.is_mean_mode(model)
    assert (model.predict(x, verbose=0) == 0).any()


# --- seeds --------------------------------------------------------------------------------


def test_same_seed_same_masks_different_seed_different_masks():
    xs = [_inputs((32, 16), seed=s) for s in range(3)]

    def run(seed):
        layer = MCDropout(0.5, seed=seed)
        return [_np(layer(x, training=training)) for x in xs for training in (False, True)]

    a, b, c = run(42), run(42), run(43)
    for ya, yb in zip(a, b):
        np.testing.assert_array_equal(ya, yb)
    assert not any(np.array_equal(ya, yc) for ya, yc in zip(a, c))


# --- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"rate": -0.1}, "rate"),
        ({"rate": 1.0}, "rate"),
        ({"rate": 1.5}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"rate": "a"}, "rate"),
        ({"rate": True}, "rate"),
        ({"rate": 0.5, "noise_shape": (None, 0)}, "noise_shape"),
        ({"rate": 0.5, "noise_shape": (None, -2)}, "noise_shape"),
        ({"rate": 0.5, "seed": -1}, "seed"),
        ({"rate": 0.5, "seed": 1.5}, "seed"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        MCDropout(**kwargs)


# --- serialization ------------------------------------------------------------------------


def test_config_round_trip():
    layer = MCDropout(0.25, noise_shape=(None, 1, 4), seed=9, name="drop")
    config = layer.get_config()
    assert config["rate"] == 0.25 and config["noise_shape"] == (None, 1, 4)
    assert config["seed"] == 9
    clone = MCDropout.from_config(config)
    assert clone.get_config() == config


@pytest.mark.parametrize("mean", [True, False])
def test_keras_file_restores_the_layer_and_its_sampling_state(tmp_path, mean):
    x = _inputs((64, 5, 4))
    model = keras.Sequential([
        keras.Input((5, 4)),
        MCDropout(0.4, noise_shape=(None, 1, 4), seed=11),
        keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=0)),
    ])
    tfp_bnn.set_mean_mode(model, mean)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    layer = loaded.layers[0]
    assert type(layer) is MCDropout
    assert (layer.rate, layer.noise_shape, layer.seed) == (0.4, (None, 1, 4), 11)
    # The switch is saved: the default after construction would be 1 (sampling).
    assert float(layer.sampling.numpy()) == (0.0 if mean else 1.0)
    assert tfp_bnn.is_mean_mode(loaded) == mean
    tfp_bnn.set_mean_mode(loaded)
    tfp_bnn.set_mean_mode(model)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_saved_mean_mode_makes_the_loaded_layer_the_identity(tmp_path):
    x = _inputs((64, 8))
    model = _dropout_model((8,), rate=0.5, seed=12)
    tfp_bnn.set_mean_mode(model)
    path = os.path.join(tmp_path, "dropout.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), x)
    tfp_bnn.set_mean_mode(loaded, False)
    assert (loaded.predict(x, verbose=0) == 0).any()


# --- training -----------------------------------------------------------------------------


def _regression_data(n=64):
    rng = np.random.default_rng(13)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x @ rng.normal(size=(4, 1))).astype("float32")


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_one_epoch_changes_every_weight(jit_compile):
    x, y = _regression_data()
    model = keras.Sequential([
        keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
        MCDropout(0.2, seed=14), keras.layers.Dense(1),
    ])
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=jit_compile)
    assert model.jit_compile is jit_compile
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for b, v in zip(before, model.trainable_variables):
        assert not np.array_equal(b, v.numpy()), f"{v.path} did not change"
    # Still a dropout network at prediction, in the same compilation mode.
    probe = _dropout_model((256,), rate=0.3, seed=15)
    probe.compile(jit_compile=jit_compile)
    assert probe.jit_compile is jit_compile
    dropped = probe.predict(_inputs((200, 256)), verbose=0) == 0
    assert abs(dropped.mean() - 0.3) < _five_se(0.3, dropped.size)


def test_kl_scheduler_accepts_a_model_with_mc_dropout():
    x, y = _regression_data()
    model = keras.Sequential([
        keras.Input((4,)), DenseFlipout(8, activation="relu", seed=16),
        MCDropout(0.2, seed=17), keras.layers.Dense(1),
    ])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    history = model.fit(x, y, epochs=1, batch_size=32, verbose=0, callbacks=[KLScheduler(len(x))])
    assert np.isfinite(history.history["loss"][0])
    kl = history.history["kl"][0]
    assert np.isfinite(kl) and kl > 0  # DenseFlipout's KL only
    assert history.history["kl_weight"][0] == pytest.approx(1.0 / len(x))


# --- mixed precision ----------------------------------------------------------------------


def test_float16_outputs_under_mixed_precision(mixed_float16):
    rate = 0.3
    x = _inputs((256, 64), dtype="float16")
    layer = MCDropout(rate, seed=18)
    out = layer(x)
    assert layer.compute_dtype == "float16" and layer.sampling.dtype == "float32"
    assert out.dtype == tf.float16
    out = _np(out)
    assert np.all(np.isfinite(out))
    dropped = out == 0
    assert abs(dropped.mean() - rate) < _five_se(rate, out.size)
    # Kept units: x / (1 - rate) up to three float16 roundings (of 1 - rate, of its
    # inverse and of the product; unit roundoff 2**-11 each, plus second-order terms).
    kept = ~dropped
    expected = x[kept].astype("float64") / (1.0 - rate)
    np.testing.assert_allclose(out[kept].astype("float64"), expected, rtol=3.01 * 2.0**-11)
    tfp_bnn.set_mean_mode(layer)
    np.testing.assert_array_equal(_np(layer(x)), x)

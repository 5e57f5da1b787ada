"""Tests of the homoscedastic noise head: one learned s = log sigma^2 per output."""

import math
import os

import keras
import numpy as np
import pytest
from tests.gradients import layer_value_and_gradients
import tfp_bnn
from tfp_bnn.layers.heads.homoscedastic_noise import HomoscedasticNoise
from tfp_bnn.losses import GaussianNLL

pytestmark = pytest.mark.jax


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def test_exported_from_the_layers_package():
    assert tfp_bnn.layers.HomoscedasticNoise is HomoscedasticNoise


@pytest.mark.parametrize("input_shape", [(5, 1), (4, 3), (2, 3, 2)])
def test_output_is_the_means_then_s_broadcast(input_shape):
    units = input_shape[-1]
    layer = HomoscedasticNoise(initial_log_variance=-1.5)
    x = _x(input_shape)
    out = keras.ops.convert_to_numpy(layer(x))
    assert out.shape == (*input_shape[:-1], 2 * units)
    # One s per output, set apart so a swapped or mis-broadcast axis shows.
    s = np.arange(units, dtype="float32") - 2.0
    layer.log_variance.assign(s)
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_array_equal(out[..., :units], x)
    np.testing.assert_array_equal(out[..., units:], np.broadcast_to(s, input_shape))


def test_starts_at_the_initial_log_variance():
    layer = HomoscedasticNoise(initial_log_variance=-2)
    out = keras.ops.convert_to_numpy(layer(_x((3, 2))))
    np.testing.assert_array_equal(out[:, 2:], np.full((3, 2), -2.0, "float32"))
    assert HomoscedasticNoise().initial_log_variance == 0.0


@pytest.mark.parametrize("input_shape", [(None, 1), (7, 3), (None, 5, 2)])
def test_shape_inference(input_shape):
    layer = HomoscedasticNoise()
    expected = (*input_shape[:-1], 2 * input_shape[-1])
    symbolic = layer(keras.Input(input_shape[1:], batch_size=input_shape[0]))
    assert tuple(symbolic.shape) == expected
    assert layer.compute_output_shape(input_shape) == expected
    eager_shape = tuple(4 if d is None else d for d in input_shape)
    out = layer(_x(eager_shape))
    assert tuple(out.shape) == tuple(4 if d is None else d for d in expected)
    # An unknown last axis has an unknown doubled size.
    assert layer.compute_output_shape((None, None)) == (None, None)


def test_one_trainable_log_variance_per_output():
    layer = HomoscedasticNoise()
    layer.build((None, 3))
    assert [v.name for v in layer.trainable_weights] == ["log_variance"]
    assert tuple(layer.log_variance.shape) == (3,)
    assert layer.non_trainable_weights == []
    frozen = HomoscedasticNoise(trainable=False)
    frozen.build((None, 3))
    assert frozen.trainable_weights == []


def test_gradient_of_the_nll_reaches_the_log_variance():
    # GaussianNLL at s: d/ds mean(0.5 s + 0.5 r^2 exp(-s)) = 0.5 (1 - mean(r^2) exp(-s)).
    # At s = 1.5 the two terms are far from cancelling (mean r^2 ~ 2).
    layer = HomoscedasticNoise(initial_log_variance=1.5)
    mean = _x((64, 1), 1)
    y = _x((64, 1), 2)
    layer.build(mean.shape)
    _, (grad,) = layer_value_and_gradients(layer, lambda out: GaussianNLL()(y, out), mean)
    expected = 0.5 * (1.0 - np.mean((y - mean).astype(np.float64) ** 2) * math.exp(-1.5))
    assert abs(expected) > 0.1
    np.testing.assert_allclose(grad, [expected], rtol=1e-5)


def test_mixed_precision_keeps_the_variable_in_float32():
    layer = HomoscedasticNoise(initial_log_variance=-1.0, dtype="mixed_float16")
    out = layer(_x((4, 2)))
    assert out.dtype == "float16"
    assert layer.log_variance.dtype == "float32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(out)[:, 2:], -1.0)


@pytest.mark.parametrize("kwargs", [{}, {"initial_log_variance": -3.25, "name": "noise"},
                                    {"initial_log_variance": 2, "trainable": False}])
def test_config_round_trip(kwargs):
    layer = HomoscedasticNoise(**kwargs)
    config = layer.get_config()
    assert config["initial_log_variance"] == float(kwargs.get("initial_log_variance", 0.0))
    clone = HomoscedasticNoise.from_config(config)
    assert clone.get_config() == config
    assert clone.trainable == kwargs.get("trainable", True)


def test_keras_file_round_trip_in_a_model(tmp_path):
    inputs = keras.Input((3,))
    outputs = HomoscedasticNoise(initial_log_variance=0.5, name="noise")(
        keras.layers.Dense(2, name="mean")(inputs))
    model = keras.Model(inputs, outputs)
    # Away from the initial value: the file must carry the learned s, not rebuild it.
    model.get_layer("noise").log_variance.assign([-1.25, 0.75])
    x = _x((5, 3), 3)
    expected = keras.ops.convert_to_numpy(model(x))
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    noise = loaded.get_layer("noise")
    assert isinstance(noise, HomoscedasticNoise)
    assert noise.initial_log_variance == 0.5
    np.testing.assert_array_equal(noise.log_variance.numpy(), [-1.25, 0.75])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), expected)


def test_learns_the_noise_variance_of_the_data():
    """y = x + N(0, 0.5^2): the maximum-likelihood s is log 0.25.

    With n residuals the variance estimate has a sampling s.d. of
    sigma^2 sqrt(2 / n) (0.0078 at n = 2048); the test allows 4 of them.
    The fitted s must also be the MLE for the fitted mean, log mean(r^2),
    to within 1% (the optimiser converged rather than stopped near).
    """
    n, sigma = 2048, 0.5
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.0, 2.0, size=(n, 1)).astype("float32")
    y = (x + sigma * rng.normal(size=(n, 1))).astype("float32")
    dense = keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(0.2))
    noise = HomoscedasticNoise()
    model = keras.Sequential([keras.Input((1,)), dense, noise])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=GaussianNLL())
    # 300 full-batch steps in one epoch (Keras's per-epoch overhead dominates otherwise).
    steps = 300
    model.fit(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), batch_size=n, epochs=1,
              shuffle=False, verbose=0)
    variance = math.exp(float(noise.log_variance.numpy()[0]))
    tolerance = 4.0 * sigma**2 * math.sqrt(2.0 / n)
    assert abs(variance - sigma**2) < tolerance, variance
    residual = y - keras.ops.convert_to_numpy(dense(x))
    assert variance == pytest.approx(float(np.mean(residual**2)), rel=1e-2)
    # The mean is the line y = x: the least-squares slope has s.d.
    # sigma / (sqrt(n) std(x)), std(x) = 4 / sqrt(12) for U(-2, 2); allow 4.
    slope_sd = sigma / (math.sqrt(n) * 4.0 / math.sqrt(12.0))
    np.testing.assert_allclose(dense.kernel.numpy(), [[1.0]], atol=4.0 * slope_sd)


def test_the_regression_predictive_reads_s_as_the_aleatoric_variance():
    inputs = keras.Input((3,))
    mean = tfp_bnn.layers.DenseFlipout(2, kl_weight=0.01, seed=1)(inputs)
    noise = HomoscedasticNoise(name="noise")
    model = keras.Model(inputs, noise(mean))
    noise.log_variance.assign([-1.0, 0.5])
    pred = tfp_bnn.predict.regression(model, _x((6, 3), 4), num_samples=4)
    assert pred.mean.shape == (6, 2)
    np.testing.assert_allclose(pred.aleatoric_variance, np.broadcast_to(np.exp([-1.0, 0.5]),
                                                                         (6, 2)), rtol=1e-6)
    # The weight samples spread the means: epistemic variance on top.
    assert np.all(pred.epistemic_variance > 0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "0.0", None,
                                   True, [0.0]])
def test_bad_initial_log_variance_raises_naming_it(value):
    with pytest.raises(ValueError, match="initial_log_variance") as info:
        HomoscedasticNoise(initial_log_variance=value)
    assert repr(value) in str(info.value)


def test_unknown_last_dimension_raises():
    with pytest.raises(ValueError, match="known last dimension"):
        HomoscedasticNoise()(keras.Input((None,)))
    with pytest.raises(ValueError, match="known last dimension"):
        HomoscedasticNoise().build((4, 3, None))

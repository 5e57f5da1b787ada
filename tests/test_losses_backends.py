"""The regression losses and MeanRMSE on every backend, inside compiled Keras steps.

tests/test_losses_numeric_safety.py checks the extreme values with
`tf.GradientTape`; these tests check the same behaviour through
`tests.gradients`, which differentiates on the active backend, and check
the values `model.evaluate` reports (a jit-compiled step on JAX, a
`tf.function` on TensorFlow) against NumPy.
"""

import math

import keras
import numpy as np
import pytest

from tests.gradients import value_and_gradients
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import MomentGaussianNLL
from tfp_bnn.losses import gaussian_log_likelihood_mc
from tfp_bnn.losses import gaussian_nll
from tfp_bnn.losses import predictive_rmse
from tfp_bnn.metrics import MeanRMSE

pytestmark = pytest.mark.jax


def _numpy_nll(y, mean, log_var):
    """Kendall and Gal (2017), eq. 5, plus 0.5 log(2 pi), in float64."""
    return 0.5 * np.log(2 * np.pi) + 0.5 * log_var + 0.5 * (y - mean) ** 2 * np.exp(-log_var)


def _fixed_model(kernel, bias):
    """A Dense(2) model [mean, s] with the given weights: its outputs are known in NumPy."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.layers[0].set_weights([kernel, bias])
    return model


def _data(seed=0, n=40):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = rng.normal(size=(n, 1)).astype("float32")
    kernel = rng.normal(size=(3, 2)).astype("float32") * 0.5
    bias = np.float32([0.1, -0.3])
    return x, y, kernel, bias


def test_evaluate_reports_the_numpy_nll_and_rmse():
    x, y, kernel, bias = _data()
    model = _fixed_model(kernel, bias)
    model.compile(optimizer="adam", loss=GaussianNLL(), metrics=[MeanRMSE()])
    # Three batches of unequal size: Keras averages the per-batch means by batch size.
    loss, rmse = model.evaluate(x, y, batch_size=16, verbose=0)
    out = x.astype(np.float64) @ kernel + bias
    nll = _numpy_nll(y[:, 0].astype(np.float64), out[:, 0], out[:, 1])
    assert loss == pytest.approx(nll.mean(), rel=1e-5)
    assert rmse == pytest.approx(math.sqrt(np.mean((y[:, 0] - out[:, 0]) ** 2)), rel=1e-5)


def test_weighted_mean_rmse_in_evaluate_matches_numpy():
    x, y, kernel, bias = _data(seed=1)
    weights = np.linspace(0.0, 2.0, len(x)).astype("float32")
    model = _fixed_model(kernel, bias)
    model.compile(optimizer="adam", loss=GaussianNLL(), weighted_metrics=[MeanRMSE()])
    _, rmse = model.evaluate(x, y, sample_weight=weights, batch_size=16, verbose=0)
    out = x.astype(np.float64) @ kernel + bias
    expected = math.sqrt(np.sum(weights * (y[:, 0] - out[:, 0]) ** 2) / np.sum(weights))
    assert rmse == pytest.approx(expected, rel=1e-5)


def test_fit_with_gaussian_nll_decreases_the_loss():
    rng = np.random.default_rng(2)
    x = rng.uniform(-2.0, 2.0, size=(256, 3)).astype("float32")
    y = (x @ np.float32([[1.0], [-2.0], [0.5]]) + 0.3 * rng.normal(size=(256, 1))).astype(
        "float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss=GaussianNLL(),
                  metrics=[MeanRMSE()])
    before = model.evaluate(x, y, verbose=0)[0]
    history = model.fit(x, y, batch_size=32, epochs=10, verbose=0)
    after = model.evaluate(x, y, verbose=0)[0]
    assert np.all(np.isfinite(history.history["loss"]))
    # The noise std is 0.3: the best NLL is 0.5 log(2 pi e 0.09) ~ 0.22; the
    # initial one is well above 1, so halfway there is a real decrease.
    assert after < before - 0.5, (before, after)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gaussian_nll_is_finite_with_finite_gradients_at_extreme_variances(log_var, dtype):
    y = np.zeros(2, dtype)
    y_pred = np.array([[0.0, log_var], [1e3, log_var]], dtype)
    value, (grad,) = value_and_gradients(lambda p: keras.ops.mean(gaussian_nll(y, p)), y_pred)
    mean = y_pred[:, 0].astype(np.float64)
    expected = _numpy_nll(np.zeros(2), mean, log_var).mean()
    # float16 predictions are widened: exp(25) overflows float16.
    assert value.dtype == np.float32
    assert float(value) == pytest.approx(expected, rel=1e-5)
    # Exact derivatives of the mean over the 2 rows (residual r = y - mean).
    d_mean = mean * math.exp(-log_var) / 2
    d_s = 0.5 * (1.0 - mean**2 * math.exp(-log_var)) / 2
    exact = np.stack([d_mean, d_s], axis=-1)
    # The gradient has the predictions' dtype: check it wherever that dtype holds it.
    representable = np.abs(exact) < np.finfo(dtype).max
    assert np.all(np.isfinite(grad[representable]))
    np.testing.assert_allclose(grad[representable], exact[representable], rtol=1e-3, atol=1e-6)


def test_mc_log_likelihood_and_rmse_match_numpy():
    rng = np.random.default_rng(3)
    num_samples, n = 7, 5
    y = rng.normal(size=n).astype("float32")
    means = rng.normal(size=(num_samples, n)).astype("float32")
    log_vars = rng.uniform(-1.0, 1.0, size=(num_samples, n)).astype("float32")
    densities = np.exp(-_numpy_nll(y[None, :].astype(np.float64), means, log_vars))
    expected = np.log(densities.mean(axis=0)) - np.log(2.0)
    result = gaussian_log_likelihood_mc(y, means, log_vars, y_scale=2.0)
    assert tuple(result.shape) == (n,)
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-5)
    rmse = predictive_rmse(y, means, y_scale=2.0)
    expected_rmse = 2.0 * math.sqrt(np.mean((means.astype(np.float64).mean(0) - y) ** 2))
    assert float(rmse) == pytest.approx(expected_rmse, rel=1e-5)


def test_mc_log_likelihood_gradients_are_finite_when_densities_underflow():
    y = np.zeros(2, "float32")
    means = np.array([[0.0, 0.0], [1e3, -1e3], [1e3, 1e3]], "float32")
    log_vars = np.full((3, 2), -50.0, "float32")
    value, grads = value_and_gradients(
        lambda m, s: keras.ops.sum(gaussian_log_likelihood_mc(y, m, s)), means, log_vars)
    assert np.isfinite(value)
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_predictive_rmse_has_a_zero_gradient_at_a_perfect_fit():
    y = np.float32([1.0, -2.0])
    means = np.float32([[1.0, -2.0], [1.0, -2.0]])
    value, (grad,) = value_and_gradients(lambda m: predictive_rmse(y, m), means)
    assert float(value) == 0.0
    np.testing.assert_array_equal(grad, 0.0)


def _moment_model(mode, kernel, bias, cov):
    """[means (2), log variances (2)] from a fixed Dense (mode "diagonal"), or [means (2),
    covariance (4)] with the fixed covariance `cov` for every example (mode "full")."""
    x = keras.Input((3,))
    head = keras.layers.Dense(kernel.shape[1])
    outputs = head(x)
    if mode == "full":
        constant = keras.layers.Dense(4, kernel_initializer="zeros", trainable=False,
                                      bias_initializer=keras.initializers.Constant(cov.ravel()))
        outputs = keras.layers.Concatenate()([outputs, constant(x)])
    model = keras.Model(x, outputs)
    head.set_weights([kernel, bias])
    return model


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_moment_gaussian_nll_in_evaluate_and_fit_matches_numpy(mode):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(24, 3)).astype("float32")
    y = rng.normal(size=(24, 2)).astype("float32")
    width = 4 if mode == "diagonal" else 2
    kernel = (0.5 * rng.normal(size=(3, width))).astype("float32")
    bias = (0.1 * rng.normal(size=width)).astype("float32")
    cov = np.float32([[1.5, 0.4], [0.4, 0.8]])
    model = _moment_model(mode, kernel, bias, cov)
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=MomentGaussianNLL(mode=mode, jitter=0.0))
    loss = model.evaluate(x, y, batch_size=8, verbose=0)
    out = x.astype(np.float64) @ kernel + bias
    residual = y - out[:, :2]
    if mode == "diagonal":
        expected = _numpy_nll(y, out[:, :2], out[:, 2:]).sum(axis=1).mean()
    else:
        quad = np.einsum("bi,ij,bj->b", residual, np.linalg.inv(cov), residual)
        expected = 0.5 * (2 * math.log(2 * math.pi) + np.linalg.slogdet(cov)[1] + quad).mean()
    assert loss == pytest.approx(expected, rel=1e-5)
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < loss

"""Tests of VarianceScaling: the closed-form minimum for one sample, SciPy's for a mixture,
the layer's map, saving, bad input."""

import keras
import numpy as np
import pytest
from scipy import optimize
from scipy import special
from scipy import stats

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import run_keras_layer_test
from tfp_bnn.calibration import VarianceScaling


def _outputs(rows=500, outputs=2, samples=1, seed=0):
    """Sampled heads [S, N, 2D] whose sigma is half the noise's on output 0, twice on 1."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(rows, outputs))
    truth = np.array([1.0, 0.5])[:outputs] * np.exp(0.3 * rng.normal(size=(rows, outputs)))
    y = mean + truth * rng.normal(size=(rows, outputs))
    claimed = truth * np.array([0.5, 2.0])[:outputs]
    means = mean[None] + 0.2 * truth * rng.normal(size=(samples, rows, outputs))
    log_variances = np.broadcast_to(np.log(claimed ** 2), means.shape)
    return np.concatenate([means, log_variances], axis=-1), y


def test_one_sample_gives_the_closed_form_mean_squared_standardised_residual():
    outputs, y = _outputs()
    layer = VarianceScaling().fit(outputs[0], y)
    mean, variance = outputs[0][:, :2], np.exp(outputs[0][:, 2:])
    expected = np.mean((y - mean) ** 2 / variance, axis=0)
    np.testing.assert_allclose(layer.variance_factor, expected, rtol=1e-6)
    assert layer.variance_factor[0] > 2.0 and layer.variance_factor[1] < 0.5
    assert layer.fit_result["converged"]
    assert layer.fit_result["nll_after"] < layer.fit_result["nll_before"]


def test_a_mixture_reaches_the_nll_minimum_scipy_finds():
    outputs, y = _outputs(samples=10)
    means, log_variances = outputs[..., :2], outputs[..., 2:]

    def nll(theta):
        density = stats.norm.logpdf(y, means, np.exp(0.5 * (log_variances + theta))).sum(-1)
        return float(-np.mean(special.logsumexp(density, axis=0) - np.log(10)))
    found = optimize.minimize(nll, np.zeros(2), method="L-BFGS-B",
                              options={"ftol": 1e-15, "gtol": 1e-10})
    layer = VarianceScaling().fit(outputs, y)
    assert layer.fit_result["nll_after"] == pytest.approx(found.fun, abs=1e-9)
    np.testing.assert_allclose(np.log(layer.variance_factor), found.x, atol=1e-4)


@pytest.mark.jax
def test_the_layer_shifts_the_log_variances_only():
    outputs, y = _outputs(rows=40)
    layer = VarianceScaling().fit(outputs[0], y)
    x = outputs[0].astype("float32")
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_array_equal(out[:, :2], x[:, :2])
    np.testing.assert_allclose(out[:, 2:], x[:, 2:] + np.log(layer.variance_factor),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_keras_run_layer_test():
    run_keras_layer_test(VarianceScaling, {}, 4, 1)


@pytest.mark.jax
def test_a_saved_model_keeps_the_factor(tmp_path):
    outputs, y = _outputs(rows=60)
    model = keras.Sequential([keras.Input((4,)), VarianceScaling().fit(outputs[0], y)])
    x = outputs[0].astype("float32")
    assert_saved_model_computes_the_same(model, x, tmp_path / "m.keras")


@pytest.mark.parametrize("outputs, y, message", [
    (np.zeros((5, 3)), np.zeros(5), "2 D"),
    (np.zeros((5,)), np.zeros(5), "`outputs`"),
    (np.full((5, 2), np.inf), np.zeros(5), "`outputs` has NaN"),
    (np.zeros((5, 2)), np.zeros(4), "`y` must be \\[5, 1\\]"),
    (np.zeros((5, 2)), np.full(5, np.nan), "`y` has NaN"),
])
def test_bad_fit_arguments_name_themselves(outputs, y, message):
    with pytest.raises(ValueError, match=message):
        VarianceScaling().fit(outputs, y)


def test_an_odd_head_is_refused_when_built():
    with pytest.raises(ValueError, match="even"):
        VarianceScaling().build((None, 3))

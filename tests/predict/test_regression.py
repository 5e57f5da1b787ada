"""Regression summaries: the eq. 67 decomposition, eq. 49 log-likelihood, intervals."""

import math
from statistics import NormalDist

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.predict import RegressionPrediction


def test_decomposition_by_hand():
    # Two samples, one point: means 1 and 3, variances 0.5 and 1.5.
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    assert pred.mean[0] == 2.0
    assert pred.epistemic_variance[0] == 1.0  # ((1-2)^2 + (3-2)^2) / 2
    assert pred.aleatoric_variance[0] == 1.0  # (0.5 + 1.5) / 2
    assert pred.total_variance[0] == 2.0
    assert pred.stddev[0] == math.sqrt(2.0)


def test_log_likelihood_is_log_mean_exp_of_densities():
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    y = 2.5
    densities = [math.exp(-((y - m) ** 2) / (2 * v)) / math.sqrt(2 * math.pi * v)
                 for m, v in ((1.0, 0.5), (3.0, 1.5))]
    assert pred.log_likelihood([y])[0] == pytest.approx(math.log(sum(densities) / 2), rel=1e-12)


def test_log_likelihood_stays_finite_for_extreme_log_variances():
    # s = +-50 as a heteroscedastic head may output: densities far below float64's
    # smallest number one by one still give a finite log-mean-exp.
    means = np.array([[0.0], [0.0]])
    pred = RegressionPrediction(means, np.exp(np.array([[-50.0], [50.0]])))
    values = pred.log_likelihood([1e3])
    assert np.all(np.isfinite(values))
    lower, upper = pred.interval(0.9)
    assert np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))


def test_single_gaussian_interval_and_coverage():
    pred = RegressionPrediction([[[0.0, 10.0]]], [[[4.0, 1.0]]])
    lower, upper = pred.interval(0.95)
    z = NormalDist().inv_cdf(0.975)
    np.testing.assert_allclose(lower, [[-2 * z, 10 - z]], rtol=1e-9)
    np.testing.assert_allclose(upper, [[2 * z, 10 + z]], rtol=1e-9)
    np.testing.assert_allclose(pred.z_interval(0.95)[0], lower, rtol=1e-9)
    # Intervals: [-3.92, 3.92] and [8.04, 11.96].
    assert pred.coverage([[3.0, 10.5]], 0.95) == 1.0
    assert pred.coverage([[5.0, 10.5]], 0.95) == 0.5
    assert pred.coverage([[5.0, 12.5]], 0.95) == 0.0


def test_mixture_interval_matches_mixture_cdf():
    means = np.array([[-1.0], [2.0], [2.5]])
    variances = np.array([[0.25], [1.0], [0.04]])
    pred = RegressionPrediction(means, variances)
    lower, upper = pred.interval(0.8)

    def cdf(q):
        return np.mean([NormalDist(m, math.sqrt(v)).cdf(q)
                        for m, v in zip(means[:, 0], variances[:, 0])])

    assert cdf(float(lower[0])) == pytest.approx(0.1, abs=1e-9)
    assert cdf(float(upper[0])) == pytest.approx(0.9, abs=1e-9)


def test_interval_without_noise_uses_sample_quantiles():
    means = np.arange(101, dtype=float)[:, None]
    pred = RegressionPrediction(means)
    lower, upper = pred.interval(0.9)
    assert lower[0] == pytest.approx(5.0) and upper[0] == pytest.approx(95.0)
    with pytest.raises(ValueError, match="zero noise variance"):
        pred.log_likelihood([1.0])


def test_rescale_maps_to_data_units():
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    scaled = pred.rescale(shift=10.0, scale=2.0)
    assert scaled.mean[0] == 14.0 and scaled.total_variance[0] == 8.0
    # A density in data units is the standardised one divided by the scale.
    assert scaled.log_likelihood([15.0])[0] == pytest.approx(
        pred.log_likelihood([2.5])[0] - math.log(2.0), rel=1e-12)
    assert scaled.rmse([16.0]) == pytest.approx(2 * pred.rmse([3.0]))


def test_regression_from_a_model_with_known_predictive():
    """mean = x @ mu + b; epistemic = x^2 @ sigma^2; aleatoric = exp(s) (fixed head)."""
    inputs = keras.Input((2,))
    bayes = DenseReparameterization(1, kl_weight=0.0, seed=0)
    log_var = keras.layers.Dense(1)
    outputs = keras.layers.Concatenate()([bayes(inputs), log_var(inputs)])
    model = keras.Model(inputs, outputs)
    bayes.kernel_params[0].assign([[1.0], [-1.0]])
    bayes.kernel_params[1].assign(np.log(np.expm1([[0.5], [0.25]])))
    bayes.bias.assign([0.5])
    log_var.kernel.assign([[0.3], [0.0]])
    log_var.bias.assign([-1.0])
    x = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 0.0]], "float32")
    num_samples = 20000
    pred = tfp_bnn.predict.regression(model, x, num_samples=num_samples)
    mean = x @ np.array([[1.0], [-1.0]]) + 0.5
    epistemic = np.square(x) @ np.array([[0.25], [0.0625]])
    aleatoric = np.exp(0.3 * x[:, :1] - 1.0)
    np.testing.assert_allclose(pred.aleatoric_variance, aleatoric, rtol=1e-5)
    se_mean = np.sqrt(epistemic / num_samples)
    np.testing.assert_array_less(np.abs(pred.mean - mean), 5 * se_mean + 1e-6)
    se_var = epistemic * math.sqrt(2 / (num_samples - 1))
    np.testing.assert_array_less(np.abs(pred.epistemic_variance - epistemic), 5 * se_var + 1e-9)
    # The predictive is then Gaussian with the total variance: its 95% interval
    # covers 95% of draws from it (binomial standard error with 4000 draws).
    rng = np.random.default_rng(0)
    y = mean + np.sqrt(epistemic + aleatoric) * rng.normal(size=(4000, 3, 1))
    lower, upper = pred.interval(0.95)
    coverage = np.mean((y >= lower) & (y <= upper))
    assert abs(coverage - 0.95) < 5 * math.sqrt(0.95 * 0.05 / y.size)
    assert pred.coverage(y[0], 0.95) == np.mean((y[0] >= lower) & (y[0] <= upper))


def test_mean_output_with_noise_variance():
    model = keras.Sequential([keras.Input((1,)), DenseReparameterization(1, kl_weight=0.0)])
    pred = tfp_bnn.predict.regression(model, np.ones((4, 1), "float32"), num_samples=10,
                                      output="mean", noise_variance=0.5)
    np.testing.assert_allclose(pred.aleatoric_variance, 0.5)
    assert np.all(np.isfinite(pred.log_likelihood(np.zeros(4))))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m, x: tfp_bnn.predict.regression(m, x, num_samples=0), "num_samples"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, output="var"), "output"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, noise_variance=1.0), "noise_variance"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, output="mean", noise_variance=-1.0),
         "noise_variance"),
        (lambda m, x: tfp_bnn.predict.regression(m, x[:0]), "no examples"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, 3).log_likelihood(np.zeros(5)),
         "shape"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, 3).rmse(np.full(4, np.nan)), "NaN"),
        (lambda m, x: tfp_bnn.predict.regression(m, x, 3).interval(1.5), "level"),
    ],
)
def test_bad_input(call, message):
    model = keras.Sequential([keras.Input((1,)), DenseReparameterization(2, kl_weight=0.0)])
    with pytest.raises(ValueError, match=message):
        call(model, np.ones((4, 1), "float32"))


def test_odd_output_width_is_rejected():
    model = keras.Sequential([keras.Input((1,)), DenseReparameterization(3, kl_weight=0.0)])
    with pytest.raises(ValueError, match="even last axis"):
        tfp_bnn.predict.regression(model, np.ones((2, 1), "float32"), 2)


def test_prediction_from_samples_rejects_bad_arrays():
    with pytest.raises(ValueError, match="shape"):
        RegressionPrediction(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="does not match"):
        RegressionPrediction(np.zeros((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match=">= 0"):
        RegressionPrediction(np.zeros((2, 3)), -np.ones((2, 3)))

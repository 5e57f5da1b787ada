"""tfp_bnn.predict.regression: Monte Carlo regression predictions from a model.

The summaries themselves (RegressionPrediction) are tested in test_regression_prediction.py.
"""

import math

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import DenseReparameterization

pytestmark = pytest.mark.jax


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


def test_odd_output_width_is_rejected():
    model = keras.Sequential([keras.Input((1,)), DenseReparameterization(3, kl_weight=0.0)])
    with pytest.raises(ValueError, match="even last axis"):
        tfp_bnn.predict.regression(model, np.ones((2, 1), "float32"), 2)

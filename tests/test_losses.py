"""Tests of tfp_bnn.losses: GaussianNLL and the Monte Carlo predictive scores."""

import math

import keras
import numpy as np
import pytest

from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import gaussian_log_likelihood_mc
from tfp_bnn.losses import gaussian_nll
from tfp_bnn.losses import predictive_rmse


def _numpy_nll(y, mean, log_var):
    """Kendall and Gal (2017), eq. 5, plus the 0.5 log(2 pi) constant, in float64."""
    return 0.5 * np.log(2 * np.pi) + 0.5 * log_var + 0.5 * (y - mean) ** 2 * np.exp(-log_var)


@pytest.mark.jax
def test_gaussian_nll_matches_the_closed_form():
    rng = np.random.default_rng(0)
    y = rng.normal(size=16).astype(np.float32)
    y_pred = np.stack(
        [rng.normal(size=16), rng.uniform(-3.0, 3.0, size=16)], axis=-1
    ).astype(np.float32)
    expected = _numpy_nll(y.astype(np.float64), y_pred[:, 0], y_pred[:, 1])
    np.testing.assert_allclose(np.asarray(gaussian_nll(y, y_pred)), expected, rtol=1e-5)
    loss = GaussianNLL()
    np.testing.assert_allclose(float(loss(y, y_pred)), expected.mean(), rtol=1e-5)
    # Keras passes (batch, 1) targets for a (batch, 2) output.
    np.testing.assert_allclose(float(loss(y[:, None], y_pred)), expected.mean(), rtol=1e-5)


@pytest.mark.jax
def test_gaussian_nll_is_the_normal_log_density():
    y, mean, log_var = 1.3, -0.4, 0.7
    sigma = math.exp(0.5 * log_var)
    density = math.exp(-0.5 * ((y - mean) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    value = float(gaussian_nll(np.float32([y]), np.float32([[mean, log_var]]))[0])
    assert value == pytest.approx(-math.log(density), rel=1e-6)


@pytest.mark.jax
def test_gaussian_nll_rejects_a_wrong_last_dimension():
    with pytest.raises(ValueError, match=r"last axis has 2 columns.*\(4, 3\)"):
        GaussianNLL()(np.zeros(4, np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="2 columns"):
        gaussian_nll(np.zeros(4, np.float32), np.zeros((4, 1), np.float32))


@pytest.mark.jax
def test_gaussian_nll_serializes_and_trains():
    loss = GaussianNLL(name="nll")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(restored, GaussianNLL) and restored.name == "nll"
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=GaussianNLL())
    x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    history = model.fit(x, x[:, 0], epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def _numpy_mc_ll(y, means, log_vars):
    """log (1/T) sum_t N(y | mean_t, exp(log_var_t)), summed directly in float64."""
    densities = np.exp(-_numpy_nll(y[None, :], means, log_vars))
    return np.log(densities.mean(axis=0))


def test_mc_log_likelihood_matches_a_direct_computation():
    rng = np.random.default_rng(1)
    num_samples, n = 7, 5
    y = rng.normal(size=n)
    means = rng.normal(size=(num_samples, n))
    log_vars = rng.uniform(-1.0, 1.0, size=(num_samples, n))
    expected = _numpy_mc_ll(y, means, log_vars)
    result = gaussian_log_likelihood_mc(y.astype(np.float32), means.astype(np.float32),
                                        log_vars.astype(np.float32))
    assert result.shape == (n,)
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-5)
    # Back to original units: log-densities shift by -log(y_scale).
    scaled = gaussian_log_likelihood_mc(y, means, log_vars, y_scale=np.float64(4.0))
    np.testing.assert_allclose(scaled.numpy(), expected - np.log(4.0), rtol=1e-10)


@pytest.mark.jax
def test_mc_log_likelihood_is_finite_when_every_density_underflows():
    # Each sample's density is exp(-~1250): 0 in float64, but the
    # log-mean-exp of the log-densities is finite and exact.
    y = np.zeros(1, np.float32)
    means = np.full((4, 1), 50.0, np.float32)
    log_vars = np.zeros((4, 1), np.float32)
    result = gaussian_log_likelihood_mc(y, means, log_vars)
    assert float(result[0]) == pytest.approx(-0.5 * math.log(2 * math.pi) - 1250.0, rel=1e-6)


@pytest.mark.jax
def test_mc_scores_check_their_shapes():
    with pytest.raises(ValueError, match=r"shape \[T, n\]"):
        gaussian_log_likelihood_mc(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="shape of `means`"):
        gaussian_log_likelihood_mc(np.zeros(3), np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="3 targets"):
        predictive_rmse(np.zeros(3), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="y_scale"):
        predictive_rmse(np.zeros(3), np.zeros((2, 3)), y_scale=0.0)


@pytest.mark.jax
def test_predictive_rmse_uses_the_mean_over_samples():
    y = np.array([1.0, 2.0, 3.0])
    means = np.array([[0.0, 2.0, 5.0], [2.0, 2.0, 3.0]])
    # Predictive mean [1, 2, 4]: errors [0, 0, 1], RMSE sqrt(1/3).
    assert float(predictive_rmse(y, means)) == pytest.approx(math.sqrt(1 / 3))
    assert float(predictive_rmse(y[:, None], means, y_scale=np.array([2.5]))) == pytest.approx(
        2.5 * math.sqrt(1 / 3)
    )


def test_moment_gaussian_nll_full_is_the_multivariate_normal_nll():
    import tensorflow_probability as tfp

    from tfp_bnn.losses import MomentGaussianNLL

    rng = np.random.default_rng(0)
    size, batch = 3, 5
    mean = rng.normal(size=(batch, size))
    factor = rng.normal(size=(batch, size, size))
    cov = factor @ factor.transpose(0, 2, 1) + 0.1 * np.eye(size)
    y = rng.normal(size=(batch, size))
    pred = np.concatenate([mean, cov.reshape(batch, -1)], axis=-1).astype("float32")
    got = MomentGaussianNLL("full", jitter=0.0, reduction=None)(y, pred).numpy()
    reference = -tfp.distributions.MultivariateNormalTriL(
        mean, np.linalg.cholesky(cov)).log_prob(y).numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-5)
    # Diagonal layout [means, log variances]: a sum of univariate NLLs.
    log_var = rng.normal(size=(batch, size))
    pred = np.concatenate([mean, log_var], axis=-1).astype("float32")
    got = MomentGaussianNLL("diagonal", jitter=0.0, reduction=None)(y, pred).numpy()
    reference = -tfp.distributions.Normal(mean, np.exp(0.5 * log_var)).log_prob(y).numpy().sum(-1)
    np.testing.assert_allclose(got, reference, rtol=1e-5)


def test_moment_gaussian_nll_survives_a_singular_covariance_and_checks_layouts():
    from tfp_bnn.losses import MomentGaussianNLL

    # A rank-one covariance: the relative jitter makes it factorise.
    vector = np.array([[1.0, 2.0, 3.0]])
    pred = np.concatenate([np.zeros((1, 3)), (vector.T @ vector).reshape(1, -1)], -1)
    value = MomentGaussianNLL("full")(np.ones((1, 3)), pred.astype("float32"))
    assert np.isfinite(float(value))
    with pytest.raises(ValueError, match="D \\+ D\\^2"):
        MomentGaussianNLL("full")(np.ones((1, 3)), np.ones((1, 7), "float32"))
    with pytest.raises(ValueError, match="mode"):
        MomentGaussianNLL("banded")
    with pytest.raises(ValueError, match="jitter"):
        MomentGaussianNLL(jitter=-1.0)
    loss = MomentGaussianNLL("diagonal", jitter=1e-5)
    clone = MomentGaussianNLL.from_config(loss.get_config())
    assert (clone.mode, clone.jitter) == ("diagonal", 1e-5)

"""Tests of tfp_bnn.moments.pooling against sampling from a known Gaussian."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.pooling import mean_over_tokens
from tfp_bnn.moments.pooling import select_token

J, I = 3, 2


def _random_moments(seed=0, batch=2):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(batch, J, I)).astype("float32")
    factor = rng.normal(size=(batch, J * I, J * I)).astype("float32")
    cov = factor @ factor.transpose(0, 2, 1) / (J * I)
    return Moments(tf.constant(mean), tf.constant(cov), "full")


def test_select_and_mean_are_the_linear_maps_of_the_full_covariance():
    x = _random_moments()
    cov = x.cov.numpy()
    for index in (0, -1):
        picker = np.zeros((I, J * I), "float32")
        token = index % J
        picker[:, token * I:(token + 1) * I] = np.eye(I)
        out = select_token(x, index)
        np.testing.assert_allclose(out.mean, x.mean.numpy()[:, token])
        np.testing.assert_allclose(out.cov, picker @ cov @ picker.T, rtol=1e-6)
    averager = np.tile(np.eye(I, dtype="float32"), (1, J)) / J
    out = mean_over_tokens(x)
    np.testing.assert_allclose(out.mean, x.mean.numpy().mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out.cov, averager @ cov @ averager.T, rtol=1e-5, atol=1e-7)


def test_full_mean_pool_matches_samples_within_monte_carlo_error():
    x = _random_moments(seed=1, batch=1)
    n = 40000
    rng = np.random.default_rng(2)
    chol = np.linalg.cholesky(x.cov.numpy()[0].astype("float64"))
    draws = x.mean.numpy()[0].reshape(-1) + rng.normal(size=(n, J * I)) @ chol.T
    pooled = draws.reshape(n, J, I).mean(axis=1)
    out = mean_over_tokens(x)
    se = pooled.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(pooled.mean(axis=0) - out.mean.numpy()[0]) < 5 * se)
    # Variance standard error for a Gaussian: var * sqrt(2 / (n - 1)).
    variance = pooled.var(axis=0, ddof=1)
    exact = np.diag(out.cov.numpy()[0])
    assert np.all(np.abs(variance - exact) < 5 * exact * np.sqrt(2 / (n - 1)))


def test_diagonal_mode_and_constants():
    x = _random_moments().as_mode("diagonal")
    np.testing.assert_allclose(select_token(x, 1).cov, x.cov.numpy()[:, 1])
    np.testing.assert_allclose(mean_over_tokens(x).cov, x.cov.numpy().sum(axis=1) / J ** 2,
                               rtol=1e-6)
    constant = Moments.deterministic(tf.ones([2, J, I]), "full")
    assert select_token(constant).cov is None and mean_over_tokens(constant).cov is None


def test_bad_input_is_named():
    x = _random_moments()
    with pytest.raises(ValueError, match="index"):
        select_token(x, J)
    with pytest.raises(ValueError, match="x"):
        mean_over_tokens(Moments(tf.ones([2, I]), None, "full"))
    with pytest.raises(ValueError, match="Moments"):
        mean_over_tokens(tf.ones([2, J, I]))

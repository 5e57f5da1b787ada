"""gaussian_log_likelihood (seed 000, eq. 13) and gaussian_kl_to_normal (eq. 12)."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.moments import Moments
from tfp_bnn.moments import gaussian_kl_to_normal
from tfp_bnn.moments import gaussian_log_likelihood

tfd = tfp.distributions


def _case(seed, shape=(3, 2, 4)):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape[1:]))
    factor = rng.normal(size=(shape[0], n, n)) / np.sqrt(n)
    cov = factor @ np.swapaxes(factor, 1, 2) + 0.1 * np.eye(n)
    mean, y = rng.normal(size=shape), rng.normal(size=shape)
    return [tf.constant(v, tf.float32) for v in (mean, cov, y)]


@pytest.mark.parametrize("shape", [(3, 2, 4), (3, 5)])
def test_full_mode_is_multivariate_normal(shape):
    mean, cov, y = _case(0, shape)
    noise = 0.3
    ours = gaussian_log_likelihood(y, Moments(mean, cov, "full"), noise_variance=noise, jitter=0.0)
    n = cov.shape[-1]
    scale = tf.linalg.cholesky(tf.cast(cov, tf.float64) + noise * tf.eye(n, dtype=tf.float64))
    reference = tfd.MultivariateNormalTriL(tf.reshape(tf.cast(mean, tf.float64), [3, n]), scale)
    expected = reference.log_prob(tf.reshape(tf.cast(y, tf.float64), [3, n]))
    assert ours.shape == (3,) and ours.dtype == tf.float32
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_diagonal_mode_is_a_sum_of_normals():
    mean, cov, y = _case(1)
    var = tf.reshape(tf.linalg.diag_part(cov), mean.shape)
    ours = gaussian_log_likelihood(y, Moments(mean, var, "diagonal"), noise_variance=0.2,
                                   jitter=0.0)
    expected = tf.reduce_sum(tfd.Normal(mean, tf.sqrt(var + 0.2)).log_prob(y), axis=[1, 2])
    np.testing.assert_allclose(ours, expected, rtol=1e-6)
    # A diagonal full covariance gives the same value.
    full = gaussian_log_likelihood(y, Moments(mean, var, "diagonal").as_mode("full"),
                                   noise_variance=0.2, jitter=0.0)
    np.testing.assert_allclose(full, ours, rtol=1e-6)


def test_jitter_is_relative_and_small():
    mean, cov, y = _case(2)
    pred = Moments(mean, cov, "full")
    exact = gaussian_log_likelihood(y, pred, jitter=0.0)
    jittered = gaussian_log_likelihood(y, pred)
    assert np.max(np.abs(jittered - exact)) < 1e-3 * np.max(np.abs(exact))
    # Rescaling y, mean and cov by c (units) shifts the value by -n log c exactly.
    c, n = 1e3, 8
    scaled = gaussian_log_likelihood(y * c, Moments(mean * c, cov * c**2, "full"))
    np.testing.assert_allclose(scaled, jittered - n * np.log(c), rtol=1e-5)


def test_singular_covariance_is_finite_thanks_to_jitter():
    rng = np.random.default_rng(3)
    v = rng.normal(size=(2, 256, 1)).astype(np.float32)
    cov = tf.constant(v @ np.swapaxes(v, 1, 2))  # rank one, 256 x 256
    mean = tf.zeros([2, 256])
    y = tf.constant(rng.normal(size=(2, 256)), tf.float32)
    with_jitter = gaussian_log_likelihood(y, Moments(mean, cov, "full"))
    assert np.all(np.isfinite(with_jitter))
    without = gaussian_log_likelihood(y, Moments(mean, cov, "full"), jitter=0.0)
    assert not np.all(np.isfinite(without))


def test_bad_inputs():
    mean, cov, y = _case(4)
    with pytest.raises(ValueError, match="`y` of shape"):
        gaussian_log_likelihood(y[:, :1], Moments(mean, cov, "full"))
    with pytest.raises(ValueError, match="`noise_variance` must be > 0"):
        gaussian_log_likelihood(y, Moments.deterministic(mean))
    with pytest.raises(ValueError, match="`jitter` must be a finite number >= 0"):
        gaussian_log_likelihood(y, Moments(mean, cov, "full"), jitter=-1.0)


@pytest.mark.parametrize("prior_scale", [1.0, 0.3])
def test_kl_matches_tfp(prior_scale):
    rng = np.random.default_rng(5)
    loc = tf.constant(rng.normal(size=(4, 3)), tf.float32)
    var = tf.constant(rng.uniform(0.01, 2.0, size=(4, 3)), tf.float32)
    ours = gaussian_kl_to_normal(loc, var, prior_scale)
    expected = tf.reduce_sum(tfd.kl_divergence(tfd.Normal(loc, tf.sqrt(var)),
                                               tfd.Normal(0.0, prior_scale)))
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="`var` of shape"):
        gaussian_kl_to_normal(loc, var[:2])
    with pytest.raises(ValueError, match="`prior_scale` must be a finite number > 0"):
        gaussian_kl_to_normal(loc, var, 0.0)


def test_compiles_under_xla():
    mean, cov, y = _case(6)
    pred = Moments(mean, cov, "full")

    @tf.function(jit_compile=True)
    def run(y, pred):
        return gaussian_log_likelihood(y, pred, noise_variance=0.1), gaussian_kl_to_normal(
            pred.mean, tf.ones_like(pred.mean))

    log_lik, kl = run(y, pred)
    np.testing.assert_allclose(log_lik, gaussian_log_likelihood(y, pred, noise_variance=0.1),
                               rtol=1e-5)
    np.testing.assert_allclose(kl, gaussian_kl_to_normal(mean, tf.ones_like(mean)), rtol=1e-5)

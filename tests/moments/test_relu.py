"""relu: exact rectified-Gaussian moments, the seed's Taylor rule, edge cases."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import relu
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import sample_moments

SAMPLES = 100000


def _f32(*values):
    return [tf.constant(v, tf.float32) for v in values]


def test_exact_matches_univariate_sampling():
    rng = np.random.default_rng(0)
    mean = np.array([[-3.0, -1.0, -0.2, 0.0, 0.3, 1.0, 4.0]])
    var = np.array([[1.0, 0.5, 2.0, 1.0, 0.1, 3.0, 1.0]])
    draws = np.maximum(mean + np.sqrt(var) * rng.normal(size=(SAMPLES,) + mean.shape), 0.0)
    mc = sample_moments(draws, "diagonal")
    out = relu(Moments(*_f32(mean, var), "diagonal"))
    assert_within_se(out.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(out.cov, mc["var"], mc["var_se"], "variance")


def test_full_mode_diagonal_exact_and_cross_terms_first_order():
    rng = np.random.default_rng(1)
    n = 6
    factor = rng.normal(size=(2, n, n)) / np.sqrt(n)
    cov = factor @ np.swapaxes(factor, 1, 2)
    mean = rng.normal(size=(2, n))
    full = relu(Moments(*_f32(mean, cov), "full"))
    diag = relu(Moments(*_f32(mean, np.diagonal(cov, axis1=1, axis2=2)), "diagonal"))
    np.testing.assert_allclose(full.variance(), diag.cov, rtol=1e-6)
    np.testing.assert_allclose(full.mean, diag.mean, rtol=1e-6)
    # Off the diagonal: Phi_a Phi_b C_ab.
    phi = 0.5 * (1.0 + tf.math.erf(mean / np.sqrt(2.0 * np.diagonal(cov, axis1=1, axis2=2))))
    expected = phi.numpy()[:, :, None] * phi.numpy()[:, None, :] * cov
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(full.cov.numpy()[:, off], expected[:, off], rtol=1e-5, atol=1e-7)
    # PSD, as the module docstring argues.
    assert np.min(np.linalg.eigvalsh(full.cov.numpy())) > -1e-6


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_taylor_underestimates_negative_means(mode):
    mean, var = np.array([[-1.0, 2.0]]), np.array([[1.0, 1.0]])
    x = Moments(*_f32(mean, var), "diagonal").as_mode(mode)
    taylor, exact = relu(x, method="taylor"), relu(x, method="exact")
    np.testing.assert_array_equal(taylor.mean, [[0.0, 2.0]])
    np.testing.assert_array_equal(taylor.variance(), [[0.0, 1.0]])
    # E[relu(x)] = phi(1) - Phi(-1) = 0.0833155 for x ~ N(-1, 1).
    np.testing.assert_allclose(exact.mean[0, 0], 0.0833155, rtol=1e-5)
    assert exact.variance()[0, 0] > 0.05


@pytest.mark.parametrize("mode", ["diagonal", "full"])
@pytest.mark.parametrize("method", ["exact", "taylor"])
def test_zero_variance_and_huge_means(mode, method):
    mean = np.array([[-2.0, 0.5, 1e4, -1e4, 3.0]])
    var = np.array([[0.0, 0.0, 1.0, 1.0, 1e-30]])
    out = relu(Moments(*_f32(mean, var), "diagonal").as_mode(mode), method=method)
    assert np.all(np.isfinite(out.mean)) and np.all(np.isfinite(out.cov))
    np.testing.assert_allclose(out.mean, [[0.0, 0.5, 1e4, 0.0, 3.0]], rtol=1e-6)
    np.testing.assert_allclose(out.variance(), [[0.0, 0.0, 1.0, 0.0, 1e-30]], rtol=1e-5)
    constant = relu(Moments.deterministic(mean, mode), method=method)
    assert constant.cov is None
    np.testing.assert_array_equal(constant.mean, np.maximum(mean, 0.0).astype(np.float32))


def test_bad_method_is_named():
    with pytest.raises(ValueError, match="`method` must be one of"):
        relu(Moments.deterministic(tf.ones([1, 2])), method="probit")


def test_compiles_under_xla():
    rng = np.random.default_rng(2)
    x = Moments(*_f32(rng.normal(size=(2, 3, 4)), np.eye(12)[None].repeat(2, 0)), "full")

    @tf.function(jit_compile=True)
    def run(x):
        out = relu(x)
        return out.mean, out.cov

    mean, cov = run(x)
    eager = relu(x)
    np.testing.assert_allclose(mean, eager.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cov, eager.cov, rtol=1e-5, atol=1e-6)

"""matmul (seed 000, Prop. 1-2) and transpose against sampling and algebra."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import matmul
from tfp_bnn.moments import transpose
from tfp_bnn.moments.gaussian import unflatten_cov
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import sample_moments

SAMPLES = 20000


def _random_gaussian(rng, shape, scale):
    """Moments (full) of a Gaussian [B, *shape] with a dense random covariance."""
    batch, n = shape[0], int(np.prod(shape[1:]))
    mean = rng.normal(size=shape)
    factor = rng.normal(size=(batch, n, n)) * scale / np.sqrt(n)
    cov = factor @ np.swapaxes(factor, 1, 2)
    return mean, cov, factor


def _draw(rng, mean, factor):
    noise = rng.normal(size=(SAMPLES,) + factor.shape[:2])
    draws = mean.reshape(mean.shape[0], -1) + np.einsum("bij,sbj->sbi", factor, noise)
    return draws.reshape((SAMPLES,) + mean.shape)


def _moments(mean, cov, mode="full"):
    return Moments(tf.constant(mean, tf.float32), tf.constant(cov, tf.float32), mode)


@pytest.fixture(scope="module")
def product_case():
    rng = np.random.default_rng(0)
    ma, ca, fa = _random_gaussian(rng, (2, 3, 4), 0.8)
    mb, cb, fb = _random_gaussian(rng, (2, 4, 2), 0.8)
    draws = _draw(rng, ma, fa) @ _draw(rng, mb, fb)
    return (ma, ca), (mb, cb), sample_moments(draws, "full")


def test_full_mode_matches_sampling(product_case):
    (ma, ca), (mb, cb), mc = product_case
    c = matmul(_moments(ma, ca), _moments(mb, cb))
    assert c.mean.shape == (2, 3, 2) and c.cov.shape == (2, 6, 6)
    assert_within_se(c.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(c.cov, mc["cov"], mc["cov_se"], "covariance")


def test_seed_trace_term_fails_where_ours_passes(product_case):
    """Eq. (9) as printed, tr(S^A_k1k2 S^B_m1m2), pairs the covariances wrongly.

    The cross blocks here are not symmetric, so the printed form must lie
    outside 5 s.e. of sampling somewhere, while ours passes (test above).
    """
    (ma, ca), (mb, cb), mc = product_case
    a5, b5 = unflatten_cov(ca, (3, 4)).numpy(), unflatten_cov(cb, (4, 2)).numpy()
    ours = matmul(_moments(ma, ca), _moments(mb, cb)).cov.numpy().reshape(2, 3, 2, 3, 2)
    right = np.einsum("birjs,brksl->bikjl", a5, b5)
    printed = np.einsum("birjs,bskrl->bikjl", a5, b5)
    seed_cov = (ours - right + printed).reshape(2, 6, 6)
    with pytest.raises(AssertionError, match=r"beyond 5\.0 s\.e\."):
        assert_within_se(seed_cov, mc["cov"], mc["cov_se"], "seed covariance")


def test_diagonal_mode_matches_sampling():
    rng = np.random.default_rng(1)
    ma, mb = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 4, 2))
    va, vb = rng.uniform(0.1, 1.0, size=ma.shape), rng.uniform(0.1, 1.0, size=mb.shape)
    a = ma + np.sqrt(va) * rng.normal(size=(SAMPLES,) + ma.shape)
    b = mb + np.sqrt(vb) * rng.normal(size=(SAMPLES,) + mb.shape)
    mc = sample_moments(a @ b, "diagonal")
    c = matmul(_moments(ma, va, "diagonal"), _moments(mb, vb, "diagonal"))
    assert_within_se(c.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(c.cov, mc["var"], mc["var_se"], "variance")


@pytest.mark.parametrize("a_random, b_random", [(True, True), (True, False), (False, True)])
def test_diagonal_is_diagonal_of_full(a_random, b_random):
    rng = np.random.default_rng(2)
    ma, mb = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 4, 5))
    va, vb = rng.uniform(0.1, 1.0, size=ma.shape), rng.uniform(0.1, 1.0, size=mb.shape)

    def pair(mean, var, random):
        diag = _moments(mean, var, "diagonal") if random else Moments.deterministic(mean)
        full = diag.as_mode("full")
        return diag, full

    (a_diag, a_full), (b_diag, b_full) = pair(ma, va, a_random), pair(mb, vb, b_random)
    diag, full = matmul(a_diag, b_diag), matmul(a_full, b_full)
    np.testing.assert_allclose(diag.mean, full.mean, rtol=1e-6)
    np.testing.assert_allclose(diag.cov, full.variance(), rtol=1e-5, atol=1e-6)
    # None covariances are the same as explicit zeros.
    zeros = matmul(Moments(a_full.mean, a_full.full_covariance(), "full"),
                   Moments(b_full.mean, b_full.full_covariance(), "full"))
    np.testing.assert_allclose(full.cov, zeros.cov, rtol=1e-5, atol=1e-6)


def test_constant_times_constant_is_constant():
    c = matmul(Moments.deterministic(tf.ones([1, 2, 3])), Moments.deterministic(tf.ones([1, 3, 2])))
    assert c.cov is None
    np.testing.assert_allclose(c.mean, np.full([1, 2, 2], 3.0))


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_transpose_reindexes_the_covariance(mode):
    rng = np.random.default_rng(3)
    mean, cov, _ = _random_gaussian(rng, (2, 3, 4), 1.0)
    m = _moments(mean, cov).as_mode(mode)
    t = transpose(m)
    np.testing.assert_array_equal(t.mean, np.swapaxes(mean, 1, 2).astype(np.float32))
    # Entry (i, r) of the [3, 4] slice has flat index i*4 + r; after the
    # transpose it is (r, i), flat index r*3 + i.
    order = np.arange(12).reshape(3, 4).T.reshape(-1)
    expected = cov[:, order][:, :, order].astype(np.float32)
    if mode == "diagonal":
        expected = np.diagonal(expected, axis1=1, axis2=2).reshape(2, 4, 3)
    np.testing.assert_array_equal(t.cov, expected)
    np.testing.assert_array_equal(transpose(t).cov, m.cov)


def test_bad_inputs_name_the_argument():
    a = Moments.deterministic(tf.ones([1, 2, 3]))
    with pytest.raises(ValueError, match="`b` has 4 rows"):
        matmul(a, Moments.deterministic(tf.ones([1, 4, 2])))
    with pytest.raises(ValueError, match="`a` has mode 'diagonal' but `b` has mode 'full'"):
        matmul(a, Moments.deterministic(tf.ones([1, 3, 2]), mode="full"))
    with pytest.raises(ValueError, match="`mode`"):
        Moments(tf.ones([1, 2, 3]), None, "diag")
    with pytest.raises(ValueError, match="`a` must have a mean of rank 3"):
        matmul(Moments.deterministic(tf.ones([2, 3])), a)
    with pytest.raises(ValueError, match=r"`b` in mode 'full' .* needs a covariance"):
        matmul(a.as_mode("full"), Moments(tf.ones([1, 3, 2]), tf.ones([1, 5, 5]), "full"))


def test_compiles_under_xla():
    rng = np.random.default_rng(4)
    ma, ca, _ = _random_gaussian(rng, (2, 3, 4), 1.0)
    mb, cb, _ = _random_gaussian(rng, (2, 4, 2), 1.0)
    a, b = _moments(ma, ca), _moments(mb, cb)

    @tf.function(jit_compile=True)
    def product(a, b):
        c = transpose(transpose(matmul(a, b)))
        return c.mean, c.cov

    mean, cov = product(a, b)
    eager = matmul(a, b)
    np.testing.assert_allclose(mean, eager.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cov, eager.cov, rtol=1e-4, atol=1e-4)

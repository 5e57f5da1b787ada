"""tfp_bnn.moments on the active backend: closed forms and sampling.

The other files of tests/moments check the algebra in depth on TensorFlow;
these cheap checks run on both backends (`KERAS_BACKEND=jax pytest` runs
them too), with NumPy references: each rule against its closed form or
against sampling, the block against sampled blocks.
"""

import math

import keras
import numpy as np
import pytest

from tests.gradients import value_and_gradients
from tfp_bnn.moments import Moments
from tfp_bnn.moments import dense
from tfp_bnn.moments import gaussian_log_likelihood
from tfp_bnn.moments import layer_norm
from tfp_bnn.moments import matmul
from tfp_bnn.moments import relu
from tfp_bnn.moments import softmax
from tfp_bnn.moments import transformer_block
from tfp_bnn.testing.moments_reference import SMALL_BLOCK
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import sample_moments
from tfp_bnn.testing.moments_reference import small_block_case

pytestmark = pytest.mark.jax

SAMPLES = 20000


def _f32(x):
    return np.asarray(x, np.float32)


def _covariance(rng, batch, n, scale=1.0):
    factor = rng.normal(size=(batch, n, n)) * scale / np.sqrt(n)
    return factor @ np.swapaxes(factor, 1, 2)


def fast(fn):
    """`fn` under `jax.jit` on JAX, where an eager call compiles every operation
    for each new shape; as it is on TensorFlow (eager), whose compiled path
    tests/moments/test_transformer.py checks."""
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415 - only on the JAX backend

        return jax.jit(fn)
    return fn


def test_dense_full_mode_matches_sampling():
    rng = np.random.default_rng(0)
    shape, units = (2, 3, 4), 3
    n = 12
    mean = rng.normal(size=shape)
    factor = rng.normal(size=(2, n, n)) * 0.7 / np.sqrt(n)
    kernel_loc, kernel_var = rng.normal(size=(4, units)), rng.uniform(0.05, 0.5, (4, units))
    bias_loc, bias_var = rng.normal(size=units), rng.uniform(0.05, 0.5, units)
    x = mean + np.einsum("bij,sbj->sbi", factor, rng.normal(size=(SAMPLES, 2, n))).reshape(
        (SAMPLES,) + shape)
    kernel = kernel_loc + np.sqrt(kernel_var) * rng.normal(size=(SAMPLES, 4, units))
    bias = bias_loc + np.sqrt(bias_var) * rng.normal(size=(SAMPLES, units))
    mc = sample_moments(np.einsum("sbji,sio->sbjo", x, kernel) + bias[:, None, None], "full")
    cov = factor @ np.swapaxes(factor, 1, 2)
    y = dense(Moments(_f32(mean), _f32(cov), "full"), _f32(kernel_loc), _f32(kernel_var),
              _f32(bias_loc), _f32(bias_var))
    assert_within_se(y.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(y.cov, mc["cov"], mc["cov_se"], "covariance")
    diagonal = dense(Moments(_f32(mean), _f32(np.diagonal(cov, 0, 1, 2).reshape(shape))),
                     _f32(kernel_loc), _f32(kernel_var), _f32(bias_loc), _f32(bias_var))
    # Diagonal mode with the input's variances only: the diagonal of full mode
    # for a diagonal input covariance.
    diagonal_input = np.eye(n)[None] * np.diagonal(cov, 0, 1, 2)[:, None]
    full = dense(Moments(_f32(mean), _f32(diagonal_input), "full"), _f32(kernel_loc),
                 _f32(kernel_var), _f32(bias_loc), _f32(bias_var))
    np.testing.assert_allclose(diagonal.cov, full.variance(), rtol=1e-5)


def test_matmul_matches_sampling_with_asymmetric_cross_blocks():
    rng = np.random.default_rng(1)
    ma, mb = rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 3, 2))
    ca, cb = _covariance(rng, 1, 6, 0.6), _covariance(rng, 1, 6, 0.6)
    draws_a = ma + np.einsum("ij,sj->si", np.linalg.cholesky(ca[0]),
                             rng.normal(size=(SAMPLES, 6))).reshape(SAMPLES, 1, 2, 3)
    draws_b = mb + np.einsum("ij,sj->si", np.linalg.cholesky(cb[0]),
                             rng.normal(size=(SAMPLES, 6))).reshape(SAMPLES, 1, 3, 2)
    mc = sample_moments(draws_a @ draws_b, "full")
    c = matmul(Moments(_f32(ma), _f32(ca), "full"), Moments(_f32(mb), _f32(cb), "full"))
    assert_within_se(c.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(c.cov, mc["cov"], mc["cov_se"], "covariance")


def test_relu_is_the_rectified_gaussian_and_its_gradient_is_finite():
    mean = np.array([[-3.0, -1.0, 0.0, 0.4, 2.0, 1e4, -1e4, 0.5]])
    var = np.array([[1.0, 0.5, 1.0, 0.1, 3.0, 1.0, 1.0, 0.0]])
    out = relu(Moments(_f32(mean), _f32(var)))
    s = np.sqrt(np.where(var > 0, var, 1.0))
    alpha = mean / s
    cdf = np.array([0.5 * math.erfc(-a / math.sqrt(2.0)) for a in alpha.ravel()]).reshape(
        alpha.shape)
    pdf = np.exp(-0.5 * alpha**2) / math.sqrt(2.0 * math.pi)
    expected_mean = np.where(var > 0, mean * cdf + s * pdf, np.maximum(mean, 0.0))
    second = np.where(var > 0, (mean**2 + var) * cdf + mean * s * pdf, np.maximum(mean, 0) ** 2)
    expected_var = second - expected_mean**2
    np.testing.assert_allclose(out.mean, expected_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.cov[:, :5], expected_var[:, :5], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.cov[:, 5:], [[1.0, 0.0, 0.0]], rtol=1e-6)
    # A tiny posterior variance (softplus(rho) at rho ~ -43) keeps the gradient finite.
    tiny = _f32([[1e-37, 1e-30, 1.0]])
    _, grads = value_and_gradients(
        lambda m, v: keras.ops.sum(relu(Moments(m, v)).cov), _f32([[0.3, -0.2, 0.0]]), tiny)
    assert all(np.all(np.isfinite(g)) for g in grads)


def _softmax_jacobian(p):
    return np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - p[..., :, None] * p[..., None, :]


def test_softmax_is_the_first_order_rule_and_masks():
    rng = np.random.default_rng(2)
    # Row 3 nearly saturated (largest p 0.996): there the total minus the own
    # term in float32 would be off by 9e-4 relative (`_numerics.sum_of_others`).
    mean = rng.normal(size=(2, 3, 4)) * np.array([1.0, 1.0, 8.0])[:, None]
    cov = _covariance(rng, 2, 12)
    p = np.exp(mean - mean.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    jac = _softmax_jacobian(p)  # [B, n, q, q], one block per row
    blocks = np.zeros((2, 3, 4, 3, 4))
    for a in range(3):
        for b in range(3):
            blocks[:, a, :, b, :] = np.einsum("bij,bjk,blk->bil", jac[:, a],
                                              cov.reshape(2, 3, 4, 3, 4)[:, a, :, b, :],
                                              jac[:, b])
    full = softmax(Moments(_f32(mean), _f32(cov), "full"))
    np.testing.assert_allclose(full.mean, p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(full.cov, blocks.reshape(2, 12, 12), rtol=1e-4, atol=1e-6)
    var = np.diagonal(cov, 0, 1, 2).reshape(2, 3, 4)
    diagonal = softmax(Moments(_f32(mean), _f32(var)))
    expected = np.einsum("bnij,bnj->bni", jac**2, var)
    # Relative to each entry: float32 p - p^2 at p = 0.996 is good to ~2e-5.
    np.testing.assert_allclose(diagonal.cov, expected, rtol=1e-4)
    mask = np.ones((2, 3, 4), bool)
    mask[:, :, 1] = False
    mask[1, 2] = False  # a row with nothing to attend to
    masked = softmax(Moments(_f32(mean), _f32(var)), mask)
    assert np.all(np.asarray(masked.mean)[~mask] == 0.0)
    assert np.all(np.asarray(masked.cov)[~mask] == 0.0)
    assert np.all(np.isfinite(masked.mean)) and np.all(np.isfinite(masked.cov))


def test_layer_norm_is_the_jacobian_rule_in_both_modes():
    rng = np.random.default_rng(3)
    mean = rng.normal(size=(2, 3, 5))
    var = rng.uniform(0.01, 0.05, size=(2, 3, 5))
    cov = np.eye(15)[None] * var.reshape(2, 1, 15)
    centred = mean - mean.mean(-1, keepdims=True)
    projector = np.eye(5) - 1.0 / 5
    trace = np.einsum("ij,bnj,ji->bn", projector, var, projector)  # tr(P C_jj P)
    s = np.sqrt((centred**2).mean(-1) + trace / 5 + 1e-3)
    mu = centred / s[..., None]
    jac = (projector - mu[..., :, None] * mu[..., None, :] / 5) / s[..., None, None]
    expected = np.einsum("bnij,bnj,bnij->bni", jac, var, jac)
    for mode, cov_in in (("diagonal", var), ("full", cov)):
        out = layer_norm(Moments(_f32(mean), _f32(cov_in), mode), None, None, None, None)
        np.testing.assert_allclose(out.mean, mu, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out.variance(), expected, rtol=1e-4, atol=1e-7)


def test_gaussian_log_likelihood_matches_numpy():
    rng = np.random.default_rng(4)
    mean, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    cov = _covariance(rng, 3, 4) + 0.1 * np.eye(4)
    got = gaussian_log_likelihood(_f32(y), Moments(_f32(mean), _f32(cov), "full"), jitter=0.0)
    residual = y - mean
    quad = np.einsum("bi,bij,bj->b", residual, np.linalg.inv(cov), residual)
    expected = -0.5 * (4 * math.log(2 * math.pi) + np.linalg.slogdet(cov)[1] + quad)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


BATCH, TOKENS, WIDTH, HEADS, KEY_DIM, FF_DIM = SMALL_BLOCK


def _numpy_params(params):
    return {key: tuple(None if t is None else np.asarray(t) for t in value)
            for key, value in params.items()}


@pytest.fixture(scope="module")
def block():
    """The shared sampled block (tests/moments/test_transformer.py), NumPy parameters."""
    params, x, stages = small_block_case(10000)
    return _numpy_params(params), np.asarray(x), sample_moments(stages["output"], "diagonal")


@pytest.mark.parametrize("mode, bounds", [("full", (0.020, 0.086)),
                                          ("diagonal", (0.027, 0.207))])
def test_transformer_block_against_sampling(block, mode, bounds):
    """Within 1.25x the errors test_transformer.py measures (the zoo's
    transformer test trains through the block's gradients on both backends)."""
    params, x, mc = block
    out = fast(lambda x: tuple(transformer_block(x, params, HEADS, KEY_DIM, mode=mode)[:2]))(x)
    out = Moments(*out, mode)
    errors = [np.linalg.norm(np.asarray(got) - want) / np.linalg.norm(want)
              for got, want in ((out.mean, mc["mean"]), (out.variance(), mc["var"]))]
    assert errors[0] < 1.25 * bounds[0] and errors[1] < 1.25 * bounds[1], errors
    if mode == "full":
        assert np.min(np.linalg.eigvalsh(np.asarray(out.cov))) > -1e-5

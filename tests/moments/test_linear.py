"""dense (seed 000, Prop. 1-2 with a mean-field kernel) against sampling."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import dense
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import sample_moments

SAMPLES = 20000


def _params(rng, fan_in, units):
    return (rng.normal(size=(fan_in, units)), rng.uniform(0.05, 0.5, size=(fan_in, units)),
            rng.normal(size=units), rng.uniform(0.05, 0.5, size=units))


def _sample_dense(rng, x, params):
    """x [S, B, ..., I] -> samples of x @ W + b with W, b drawn per sample."""
    kernel_loc, kernel_var, bias_loc, bias_var = params
    kernel = kernel_loc + np.sqrt(kernel_var) * rng.normal(size=(SAMPLES,) + kernel_loc.shape)
    bias = bias_loc + np.sqrt(bias_var) * rng.normal(size=(SAMPLES,) + bias_loc.shape)
    y = np.einsum("s...i,sio->s...o", x, kernel)
    return y + bias.reshape((SAMPLES,) + (1,) * (x.ndim - 2) + bias.shape[1:])


def _f32(*values):
    return [None if v is None else tf.constant(v, tf.float32) for v in values]


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 4)])
def test_full_mode_matches_sampling(shape):
    rng = np.random.default_rng(0)
    n = int(np.prod(shape[1:]))
    mean = rng.normal(size=shape)
    factor = rng.normal(size=(shape[0], n, n)) * 0.7 / np.sqrt(n)
    cov = factor @ np.swapaxes(factor, 1, 2)
    params = _params(rng, shape[-1], 3)
    x = mean + np.einsum("bij,sbj->sbi", factor,
                         rng.normal(size=(SAMPLES, shape[0], n))).reshape((SAMPLES,) + shape)
    mc = sample_moments(_sample_dense(rng, x, params), "full")
    y = dense(Moments(*_f32(mean, cov), "full"), *_f32(*params))
    assert y.mean.shape == shape[:-1] + (3,)
    assert_within_se(y.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(y.cov, mc["cov"], mc["cov_se"], "covariance")


def test_constant_input_has_cross_token_covariance():
    """Prop. 2 with Sigma^B = 0: the shared kernel couples the tokens."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4))
    params = _params(rng, 4, 2)
    mc = sample_moments(_sample_dense(rng, np.broadcast_to(x, (SAMPLES,) + x.shape), params),
                        "full")
    y = dense(Moments.deterministic(x, "full"), *_f32(*params))
    assert_within_se(y.cov, mc["cov"], mc["cov_se"], "covariance")
    cross = y.cov.numpy().reshape(2, 3, 2, 3, 2)[:, 0, :, 1, :]
    assert np.min(np.abs(np.diagonal(cross, axis1=1, axis2=2))) > 0.1


def test_diagonal_mode_matches_sampling():
    rng = np.random.default_rng(2)
    mean, var = rng.normal(size=(2, 3, 4)), rng.uniform(0.1, 1.0, size=(2, 3, 4))
    params = _params(rng, 4, 3)
    x = mean + np.sqrt(var) * rng.normal(size=(SAMPLES, 2, 3, 4))
    mc = sample_moments(_sample_dense(rng, x, params), "diagonal")
    y = dense(Moments(*_f32(mean, var), "diagonal"), *_f32(*params))
    assert_within_se(y.mean, mc["mean"], mc["mean_se"], "mean")
    assert_within_se(y.cov, mc["var"], mc["var_se"], "variance")


@pytest.mark.parametrize("random_input", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_diagonal_is_diagonal_of_full(random_input, with_bias):
    rng = np.random.default_rng(3)
    mean, var = rng.normal(size=(2, 3, 4)), rng.uniform(0.1, 1.0, size=(2, 3, 4))
    kernel_loc, kernel_var, bias_loc, bias_var = _f32(*_params(rng, 4, 5))
    if not with_bias:
        bias_loc = bias_var = None
    x = Moments(*_f32(mean, var), "diagonal") if random_input else Moments.deterministic(mean)
    diag = dense(x, kernel_loc, kernel_var, bias_loc, bias_var)
    full = dense(x.as_mode("full"), kernel_loc, kernel_var, bias_loc, bias_var)
    np.testing.assert_allclose(diag.mean, full.mean, rtol=1e-6)
    np.testing.assert_allclose(diag.cov, full.variance(), rtol=1e-5, atol=1e-6)


def test_deterministic_everything_is_a_constant():
    y = dense(tf.ones([2, 3]), tf.ones([3, 4]), None, tf.zeros([4]))
    assert y.cov is None
    np.testing.assert_allclose(y.mean, np.full([2, 4], 3.0))


def test_bad_shapes_name_the_argument():
    x = Moments.deterministic(tf.ones([2, 3, 4]))
    with pytest.raises(ValueError, match="`kernel_loc` must have shape \\(4, units\\)"):
        dense(x, tf.ones([5, 2]), tf.ones([5, 2]))
    with pytest.raises(ValueError, match="`kernel_var` must have the shape"):
        dense(x, tf.ones([4, 2]), tf.ones([4, 3]))
    with pytest.raises(ValueError, match="`bias_loc` must have shape \\(2,\\)"):
        dense(x, tf.ones([4, 2]), None, tf.ones([3]))
    with pytest.raises(ValueError, match="`bias_var` must have shape \\(2,\\)"):
        dense(x, tf.ones([4, 2]), None, tf.ones([2]), tf.ones([1]))
    with pytest.raises(ValueError, match="`x` must have a mean of rank 2 or 3"):
        dense(tf.ones([4]), tf.ones([4, 2]), None)


def test_compiles_under_xla():
    rng = np.random.default_rng(4)
    x = Moments(*_f32(rng.normal(size=(2, 3, 4)), np.eye(12)[None].repeat(2, 0)), "full")
    params = _f32(*_params(rng, 4, 5))

    @tf.function(jit_compile=True)
    def layer(x, params):
        y = dense(x, *params)
        return y.mean, y.cov

    mean, cov = layer(x, params)
    eager = dense(x, *params)
    np.testing.assert_allclose(mean, eager.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cov, eager.cov, rtol=1e-4, atol=1e-4)

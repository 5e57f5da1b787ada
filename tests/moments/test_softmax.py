"""softmax: the first-order rule J C J^T (seed 000, Prop. 3) and masking."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import softmax


def _case(seed, shape=(2, 3, 4)):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape[1:]))
    factor = rng.normal(size=(shape[0], n, n)) / np.sqrt(n)
    mean = rng.normal(size=shape).astype(np.float32)
    return mean, (factor @ np.swapaxes(factor, 1, 2)).astype(np.float32)


def _autodiff_jacobian(mean):
    """d softmax(rows) / d logits for the whole [n, q] slice: [B, n*q, n*q]."""
    batch, n, q = mean.shape
    logits = tf.constant(mean)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        p = tf.reshape(tf.nn.softmax(logits, axis=-1), [batch, n * q])
    jac = tape.batch_jacobian(p, logits)
    return tf.reshape(jac, [batch, n * q, n * q]).numpy()


def test_full_mode_is_jacobian_sandwich():
    mean, cov = _case(0)
    out = softmax(Moments(tf.constant(mean), tf.constant(cov), "full"))
    jac = _autodiff_jacobian(mean)
    np.testing.assert_allclose(out.mean, tf.nn.softmax(mean), rtol=1e-6)
    np.testing.assert_allclose(out.cov, jac @ cov @ np.swapaxes(jac, 1, 2), atol=1e-6)
    # Rows sum to one for every draw, so each row's covariance sums to zero.
    row_sums = out.cov.numpy().reshape(2, 3, 4, 12).sum(axis=2)
    np.testing.assert_allclose(row_sums, 0.0, atol=1e-6)


def test_diagonal_mode_is_diagonal_of_the_sandwich():
    mean, cov = _case(1)
    var = np.diagonal(cov, axis1=1, axis2=2).reshape(mean.shape)
    out = softmax(Moments(tf.constant(mean), tf.constant(var), "diagonal"))
    jac = _autodiff_jacobian(mean)
    expected = np.einsum("bij,bj,bij->bi", jac, var.reshape(2, -1), jac).reshape(mean.shape)
    np.testing.assert_allclose(out.cov, expected, atol=1e-7)


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_masked_positions_are_removed(mode):
    mean, cov = _case(2)
    mask = np.ones(mean.shape, bool)
    mask[:, :, 1] = False
    mask[0, 2, 3] = False
    x = Moments(tf.constant(mean), tf.constant(cov), "full").as_mode(mode)
    out = softmax(x, tf.constant(mask))
    p, var = out.mean.numpy(), out.variance().numpy()
    assert np.all(p[~mask] == 0.0) and np.all(var[~mask] == 0.0)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    # The same as the unmasked rule on the kept logits only.
    keep = np.flatnonzero(mask[1].reshape(-1))
    kept = mean[1].reshape(-1)[keep].reshape(3, 3)
    sub = Moments(tf.constant(kept[None]), tf.constant(cov[1][keep][:, keep][None]), "full")
    expected = softmax(sub.as_mode(mode))
    np.testing.assert_allclose(p[1][mask[1]].reshape(3, 3), expected.mean[0], rtol=1e-6)
    np.testing.assert_allclose(var[1][mask[1]].reshape(3, 3), expected.variance()[0],
                               atol=1e-7)
    if mode == "full":
        c = out.cov.numpy()[1]
        np.testing.assert_allclose(c[keep][:, keep], expected.cov[0], atol=1e-7)


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_fully_masked_row_gives_zeros_not_nan(mode):
    mean, cov = _case(3)
    mask = np.ones(mean.shape, bool)
    mask[0, 1, :] = False
    out = softmax(Moments(tf.constant(mean), tf.constant(cov), "full").as_mode(mode), mask)
    assert np.all(np.isfinite(out.mean)) and np.all(np.isfinite(out.cov))
    np.testing.assert_array_equal(out.mean[0, 1], 0.0)
    np.testing.assert_array_equal(out.variance()[0, 1], 0.0)


def test_mask_broadcasts_and_is_checked():
    mean, cov = _case(4)
    x = Moments(tf.constant(mean), tf.constant(cov), "full")
    causal = np.tril(np.ones([3, 4], bool))
    broadcast = softmax(x, causal)
    explicit = softmax(x, np.broadcast_to(causal, mean.shape))
    np.testing.assert_array_equal(broadcast.cov, explicit.cov)
    with pytest.raises(ValueError, match="`mask` of shape \\(2, 3\\) does not broadcast"):
        softmax(x, np.ones([2, 3], bool))
    with pytest.raises(ValueError, match="`mask` must be boolean"):
        softmax(x, np.ones(mean.shape, np.float32))


def test_compiles_under_xla():
    mean, cov = _case(5)
    x = Moments(tf.constant(mean), tf.constant(cov), "full")
    mask = tf.constant(np.tril(np.ones([2, 3, 4], bool)))

    @tf.function(jit_compile=True)
    def run(x, mask):
        out = softmax(x, mask)
        return out.mean, out.cov

    mean_xla, cov_xla = run(x, mask)
    eager = softmax(x, mask)
    np.testing.assert_allclose(mean_xla, eager.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cov_xla, eager.cov, atol=1e-6)

"""add, and the residual branches' cross-covariances."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import add
from tfp_bnn.moments import dense
from tfp_bnn.moments.residual import attention_value_correlations
from tfp_bnn.moments.residual import feed_forward_cross_covariance
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import random_block_params


def test_means_and_covariances_add():
    rng = np.random.default_rng(0)
    mx, my = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    vx = rng.uniform(size=(2, 3, 4))
    x = Moments(tf.constant(mx, tf.float32), tf.constant(vx, tf.float32), "diagonal")
    y = Moments.deterministic(my)
    out = add(x, y)
    np.testing.assert_allclose(out.mean, mx + my, rtol=1e-6)
    np.testing.assert_array_equal(out.cov, x.cov)
    both = add(x.as_mode("full"), x.as_mode("full"))
    np.testing.assert_allclose(both.variance(), 2 * vx, rtol=1e-6)
    assert add(y, y).cov is None
    # A plain tensor is a constant in the other operand's mode.
    assert add(x.as_mode("full"), tf.constant(my, tf.float32)).mode == "full"


def test_mismatches_are_named():
    x = Moments.deterministic(tf.ones([2, 3]))
    with pytest.raises(ValueError, match="`x` has mode 'diagonal' but `y` has mode 'full'"):
        add(x, Moments.deterministic(tf.ones([2, 3]), "full"))
    with pytest.raises(ValueError, match="`x` of shape \\(2, 3\\) and `y` of shape \\(2, 4\\)"):
        add(x, Moments.deterministic(tf.ones([2, 4])))


def test_compiles_under_xla():
    x = Moments(tf.ones([2, 3, 4]), tf.eye(12, batch_shape=[2]), "full")

    @tf.function(jit_compile=True)
    def run(x):
        out = add(x, x)
        return out.mean, out.cov

    mean, cov = run(x)
    np.testing.assert_array_equal(cov, 2 * np.eye(12)[None].repeat(2, 0))


def test_cross_covariance_is_added_twice():
    rng = np.random.default_rng(1)
    mean = tf.constant(rng.normal(size=(2, 3, 4)), tf.float32)
    a = rng.normal(size=(2, 12, 12))
    cov = tf.constant(a @ a.transpose(0, 2, 1), tf.float32)
    cross = tf.constant(rng.normal(size=(2, 12, 12)), tf.float32)
    x = Moments(mean, cov, "full")
    out = add(x, x, cross)
    np.testing.assert_allclose(out.cov, 2 * cov + cross + np.swapaxes(cross, 1, 2), atol=1e-5)
    diagonal = add(x.as_mode("diagonal"), x.as_mode("diagonal"),
                   tf.reshape(tf.linalg.diag_part(cross), [2, 3, 4]))
    np.testing.assert_allclose(diagonal.cov, out.variance(), rtol=1e-6)
    # x + x with cross = Cov[x, x] is 2x: four times the covariance.
    np.testing.assert_allclose(add(x, x, cov).cov, 4 * cov, rtol=1e-6)
    with pytest.raises(ValueError, match="`cross` must have shape \\(2, 12, 12\\)"):
        add(x, x, tf.zeros([2, 3, 4]))


def _cross_from_samples(first, second):
    """Cov[first_u, second_v] over [S, B, N] samples, with standard errors."""
    d1 = first - first.mean(0)
    d2 = second - second.mean(0)
    count = first.shape[0]
    cross = np.einsum("sbu,sbv->buv", d1, d2) / (count - 1)
    fourth = np.einsum("sbu,sbv->buv", d1 * d1, d2 * d2) / count
    return cross, np.sqrt(np.maximum(fourth - cross**2, 0.0) / count)


@pytest.mark.parametrize("mode", ["full", "diagonal"])
def test_feed_forward_cross_covariance_is_exact_for_deterministic_weights(mode):
    """Gaussian z and deterministic W1, W2: Stein's lemma makes it exact."""
    rng = np.random.default_rng(2)
    batch, tokens, width, hidden, count = 2, 2, 4, 6, 100000
    n = tokens * width
    mean = rng.normal(size=(batch, tokens, width))
    factor = 0.5 * rng.normal(size=(batch, n, n)) / np.sqrt(n)
    if mode == "diagonal":
        factor = np.einsum("bij,ij->bij", factor, np.eye(n)) * 2.0
    cov = factor @ factor.transpose(0, 2, 1)
    w1 = rng.normal(size=(width, hidden)) / 2.0
    w2 = rng.normal(size=(hidden, width)) / np.sqrt(hidden)
    b1 = 0.3 * rng.normal(size=hidden)
    z = mean.reshape(batch, n) + np.einsum("bij,sbj->sbi", factor,
                                           rng.normal(size=(count, batch, n)))
    h = z.reshape(count, batch, tokens, width) @ w1 + b1
    y = (np.maximum(h, 0.0) @ w2).reshape(count, batch, n)
    reference, se = _cross_from_samples(y, z)
    h_mean = mean @ w1 + b1
    blocks = cov.reshape(batch, tokens, width, tokens, width)
    blocks = np.stack([blocks[:, j, :, j, :] for j in range(tokens)], axis=1)  # C_jj
    h_var = np.einsum("bjil,ia,la->bja", blocks, w1, w1)
    slope = 0.5 * (1.0 + np.vectorize(math.erf)(h_mean / np.sqrt(2.0 * h_var)))
    moments = Moments(tf.constant(mean, tf.float32), tf.constant(cov, tf.float32), "full")
    moments = moments.as_mode(mode)
    cross = feed_forward_cross_covariance(moments, tf.constant(slope, tf.float32),
                                          tf.constant(w1, tf.float32),
                                          tf.constant(w2, tf.float32)).numpy()
    if mode == "diagonal":
        reference = np.diagonal(reference, axis1=1, axis2=2).reshape(cross.shape)
        se = np.diagonal(se, axis1=1, axis2=2).reshape(cross.shape)
    assert_within_se(cross, reference, se, "Cov[y, z]")
    assert feed_forward_cross_covariance(Moments.deterministic(mean), slope, w1, w2) is None


def _value_path_jacobians(x, params, heads, key_dim, mask):
    """Per-head d a / d x of the mean-weight attention, scores held fixed."""
    batch, tokens, width = x.shape

    def attention(x):
        fixed = tf.stop_gradient(x)
        q = tf.reshape(fixed @ params["query"][0] + params["query"][2],
                       [batch, tokens, heads, key_dim])
        k = tf.reshape(fixed @ params["key"][0] + params["key"][2],
                       [batch, tokens, heads, key_dim])
        v = tf.reshape(x @ params["value"][0] + params["value"][2],
                       [batch, tokens, heads, key_dim])
        scores = tf.einsum("bjhd,bthd->bhjt", q, k) / math.sqrt(key_dim)
        if mask is not None:
            scores = tf.where(tf.broadcast_to(mask, scores.shape), scores, -1e30)
        output = tf.reshape(params["output"][0], [heads, key_dim, width])
        return tf.einsum("bhjt,bthd,hdo->bhjo", tf.nn.softmax(scores, -1), v, output)

    with tf.GradientTape() as tape:
        tape.watch(x)
        a = attention(x)
    jac = tape.jacobian(a, x).numpy()  # [B, H, J, I, B, J, I]
    jac = np.stack([jac[b, :, :, :, b] for b in range(batch)])
    return jac.reshape(batch, heads, tokens * width, tokens * width)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_value_correlations_match_the_jacobian(masked):
    batch, tokens, width, heads, key_dim = 2, 3, 4, 2, 2
    params = random_block_params(0, width, heads, key_dim, 8)
    rng = np.random.default_rng(3)
    mean = tf.constant(rng.normal(size=(batch, tokens, width)), tf.float32)
    mask = tf.constant(np.tril(np.ones([tokens, tokens], bool))) if masked else None
    jac = _value_path_jacobians(mean, params, heads, key_dim, mask)
    total = jac.sum(axis=1)
    n = tokens * width
    a = rng.normal(size=(batch, n, n)) / np.sqrt(n)
    cov = a @ a.transpose(0, 2, 1)
    q_mean, k_mean = [dense(Moments.deterministic(mean), *params[key]).mean
                      for key in ("query", "key")]
    for mode in ("full", "diagonal"):
        c = cov if mode == "full" else np.einsum("bii,ij->bij", cov, np.eye(n))
        x = Moments(mean, tf.constant(cov, tf.float32), "full").as_mode(mode)
        cross, between = attention_value_correlations(
            x, q_mean, k_mean, params["value"][0], params["output"][0], heads, mask)
        expected_cross = total @ c
        expected_between = (total @ c @ total.transpose(0, 2, 1)
                            - np.einsum("bhij,bjk,bhlk->bil", jac, c, jac))
        if mode == "diagonal":
            expected_cross = np.diagonal(expected_cross, axis1=1, axis2=2)
            expected_between = np.diagonal(expected_between, axis1=1, axis2=2)
            cross, between = (tf.reshape(t, [batch, n]) for t in (cross, between))
        np.testing.assert_allclose(cross, expected_cross, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(between, expected_between, rtol=1e-4, atol=1e-5)
    assert attention_value_correlations(Moments.deterministic(mean), q_mean, k_mean,
                                        params["value"][0], params["output"][0],
                                        heads) == (None, None)


def test_diagonal_cross_terms_are_held_to_the_cauchy_schwarz_bound():
    from tfp_bnn.moments.residual import bounded_cross

    var_x = tf.constant([[1.0, 4.0, 0.0]])
    var_y = tf.constant([[1.0, 1.0, 2.0]])
    cross = tf.constant([[-3.0, 1.5, 0.7]])
    # |c| <= sqrt(vx vy): -3 -> -1, 1.5 stays (bound 2), 0.7 -> 0 (x constant there).
    np.testing.assert_allclose(bounded_cross(cross, var_x, var_y).numpy(),
                               [[-1.0, 1.5, 0.0]], atol=1e-6)
    x = Moments(tf.zeros([1, 3]), var_x, "diagonal")
    y = Moments(tf.zeros([1, 3]), var_y, "diagonal")
    total = add(x, y, cross).cov.numpy()
    np.testing.assert_allclose(total, [[0.0, 8.0, 2.0]], atol=1e-6)
    assert np.all(total >= 0)
    # Gradients stay finite where one branch is constant.
    with tf.GradientTape() as tape:
        tape.watch(var_y)
        value = tf.reduce_sum(bounded_cross(cross, var_x, var_y))
    assert np.all(np.isfinite(tape.gradient(value, var_y).numpy()))

"""Scaled dot-product and multi-head attention on moments.

Per head h (attention as in Vaswani et al. 2017):

    S_h = q_h k_h^T / sqrt(K)      matmul (`tfp_bnn.moments.products`), q_h, k_h independent
    P_h = softmax(S_h)             first-order Taylor (`tfp_bnn.moments.softmax`)
    A_h = P_h v_h                  matmul, P_h and v_h independent

then the heads are concatenated head-major (head h owns columns
h*Dv:(h+1)*Dv), as keras.layers.MultiHeadAttention lays them out. Written
as A_h = V_h W_h^T both covariances would need re-indexing; the
batch-first row-major layout makes it a plain p @ v here.

Independence. With a constant input X the heads use disjoint, independent
weight columns, and the query, key and value weights are independent, so
q_h, k_h, v_h and the heads are mutually independent: exactly the
assumptions above. With a random input (a later block) all of them share X
and are correlated; we still treat them as independent (an
approximation). Consequently the covariance of the
concatenation is block diagonal over heads: the cross-head blocks are
zero.

Diagonal mode (`diagonal_attention`) keeps the heads in place and uses
einsums over the head axis instead of moving them into the batch; the
rules are the same.
"""

import math

from keras import ops

from tfp_bnn import _validation as check

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov
from tfp_bnn.moments.products import diagonal_variance as product_variance
from tfp_bnn.moments.products import matmul
from tfp_bnn.moments.products import transpose
from tfp_bnn.moments.softmax import check_mask
from tfp_bnn.moments.softmax import diagonal_variance as softmax_variance
from tfp_bnn.moments.softmax import masked_softmax
from tfp_bnn.moments.softmax import softmax


def _check_qkv(q, k, v):
    q = as_moments(q, "q", ranks=(3,))
    k = as_moments(k, "k", mode=q.mode, ranks=(3,))
    v = as_moments(v, "v", mode=q.mode, ranks=(3,))
    if k.mean.shape[-1] != q.mean.shape[-1]:
        raise ValueError(
            f"`k` has width {k.mean.shape[-1]} but `q` has width {q.mean.shape[-1]}; "
            "queries and keys must have the same size."
        )
    if v.mean.shape[1] != k.mean.shape[1]:
        raise ValueError(
            f"`v` has {v.mean.shape[1]} positions but `k` has {k.mean.shape[1]}."
        )
    return q, k, v


def scaled_dot_product_attention(q: Moments, k: Moments, v: Moments, mask=None) -> Moments:
    """Moments of softmax(q k^T / sqrt(K)) v for one head.

    Args:
        q: Moments with mean [B, Jq, K].
        k: Moments with mean [B, Jk, K], independent of `q`.
        v: Moments with mean [B, Jk, Dv], independent of `q` and `k`.
        mask: optional boolean tensor broadcastable to [B, Jq, Jk], True
            where a query may attend to a key.

    Returns:
        Moments with mean [B, Jq, Dv] in the mode of `q`.

    Raises:
        ValueError: naming `q`, `k`, `v` or `mask` for mismatched shapes.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> q = tfp_bnn.moments.Moments(rng.normal(size=[1, 3, 2]), np.full([1, 3, 2], 0.1))
    >>> v = tfp_bnn.moments.Moments.deterministic(rng.normal(size=[1, 5, 4]))
    >>> k = tfp_bnn.moments.Moments.deterministic(rng.normal(size=[1, 5, 2]))
    >>> tuple(tfp_bnn.moments.scaled_dot_product_attention(q, k, v).mean.shape)
    (1, 3, 4)
    """
    q, k, v = _check_qkv(q, k, v)
    mask = check_mask(mask, [q.mean.shape[0], q.mean.shape[1], k.mean.shape[1]])
    # Scaling each score by 1/sqrt(K) scales the
    # covariance by 1/K.
    scores = matmul(q, transpose(k)).scale(1.0 / math.sqrt(q.mean.shape[-1]))
    weights = softmax(scores, mask)
    return matmul(weights, v)


def split_heads(x: Moments, num_heads) -> Moments:
    """[B, J, H*D] -> [B*H, J, D]: heads into the batch, cross-head cov dropped.

    Batch index b*H + h. In full mode the [B, J*H*D, J*H*D] covariance keeps
    only its per-head blocks (heads assumed independent, module docstring).
    """
    tokens, width = x.mean.shape[1:]
    depth = width // num_heads
    mean = ops.reshape(x.mean, (-1, tokens, num_heads, depth))
    mean = ops.reshape(ops.transpose(mean, (0, 2, 1, 3)), (-1, tokens, depth))
    if x.cov is None:
        return Moments(mean, None, x.mode)
    if x.mode == "diagonal":
        var = ops.reshape(x.cov, (-1, tokens, num_heads, depth))
        var = ops.reshape(ops.transpose(var, (0, 2, 1, 3)), (-1, tokens, depth))
        return Moments(mean, var, x.mode)
    c = unflatten_cov(x.cov, (tokens, num_heads, depth))  # [B, j, h, d, k, g, e]
    # The diagonal over the two head axes keeps the h == g blocks.
    blocks = ops.diagonal(ops.transpose(c, (0, 1, 3, 4, 6, 2, 5)),
                          axis1=-2, axis2=-1)  # [B, j, d, k, e, h]
    blocks = ops.transpose(blocks, (0, 5, 1, 2, 3, 4))  # [B, h, j, d, k, e]
    return Moments(mean, flatten_cov(blocks, (tokens, depth)), x.mode)


def merge_heads(x: Moments, num_heads) -> Moments:
    """[B*H, J, D] -> [B, J, H*D], head-major, cross-head covariance zero."""
    tokens, depth = x.mean.shape[1:]
    mean = ops.reshape(x.mean, (-1, num_heads, tokens, depth))
    mean = ops.reshape(ops.transpose(mean, (0, 2, 1, 3)), (-1, tokens, num_heads * depth))
    if x.cov is None:
        return Moments(mean, None, x.mode)
    if x.mode == "diagonal":
        var = ops.reshape(x.cov, (-1, num_heads, tokens, depth))
        var = ops.reshape(ops.transpose(var, (0, 2, 1, 3)), (-1, tokens, num_heads * depth))
        return Moments(mean, var, x.mode)
    c = ops.reshape(x.cov, (-1, num_heads, tokens, depth, tokens, depth))
    eye = ops.eye(num_heads, dtype=c.dtype)
    # Block diagonal over heads (head = block index mod H).
    c = ops.einsum("bhjdke,hg->bjhdkge", c, eye)
    return Moments(mean, flatten_cov(c, (tokens, num_heads, depth)), x.mode)


def diagonal_attention(q_mean, q_var, k_mean, k_var, v_mean, v_var, num_heads, mask=None):
    """Diagonal-mode multi-head attention on head-major tensors, heads kept in place.

    The same rules as `scaled_dot_product_attention` per head followed by
    `merge_heads` (diagonal mode), without moving the heads into the
    batch: the products are einsums over a head axis.

    Args:
        q_mean, q_var: [B, Jq, H*K] (q_var None: a constant).
        k_mean, k_var: [B, Jk, H*K].
        v_mean, v_var: [B, Jk, H*Dv].
        num_heads: H.
        mask: None or a boolean tensor broadcastable to [B, Jq, Jk].

    Returns:
        (mean, var, p): the concatenated heads' mean and variances
        [B, Jq, H*Dv] (var None if q, k and v are all constants) and the
        attention weights at the mean scores, p [B, H, Jq, Jk].
    """
    tokens_q, key_size = q_mean.shape[1], q_mean.shape[2] // num_heads
    tokens_k, value_size = k_mean.shape[1], v_mean.shape[2] // num_heads

    def heads(t, tokens, size):
        return None if t is None else ops.reshape(t, (-1, tokens, num_heads, size))

    qm, qv = heads(q_mean, tokens_q, key_size), heads(q_var, tokens_q, key_size)
    km, kv = heads(k_mean, tokens_k, key_size), heads(k_var, tokens_k, key_size)
    vm, vv = heads(v_mean, tokens_k, value_size), heads(v_var, tokens_k, value_size)

    def scores_product(a, b):
        return ops.einsum("bjhd,bthd->bhjt", a, b)

    def values_product(a, b):
        return ops.einsum("bhjt,bthd->bjhd", a, b)

    # As `scaled_dot_product_attention`.
    factor = 1.0 / math.sqrt(key_size)
    scores = scores_product(qm, km) * factor
    scores_var = product_variance(qm, qv, km, kv, scores_product, b_axis=-1)
    if scores_var is not None:
        scores_var = scores_var * (factor * factor)
    if mask is not None:
        mask = ops.broadcast_to(mask, (ops.shape(scores)[0], tokens_q, tokens_k))
        mask = ops.broadcast_to(mask[:, None], ops.shape(scores))
    p = masked_softmax(scores, mask)  # [B, H, Jq, Jk]
    p_var = None if scores_var is None else softmax_variance(p, scores_var)
    mean = ops.reshape(values_product(p, vm), (-1, tokens_q, num_heads * value_size))
    var = product_variance(p, p_var, vm, vv, values_product, b_axis=1)
    if var is not None:
        var = ops.reshape(var, (-1, tokens_q, num_heads * value_size))
    return mean, var, p


def multi_head_attention(q: Moments, k: Moments, v: Moments, num_heads, mask=None) -> Moments:
    """Moments of multi-head attention from projected queries, keys, values.

    Args:
        q: Moments with mean [B, Jq, H*K] (head h owns columns h*K:(h+1)*K),
            e.g. from `dense(x, query kernel)`.
        k: Moments with mean [B, Jk, H*K].
        v: Moments with mean [B, Jk, H*Dv].
        num_heads: H, a positive int dividing both widths.
        mask: optional boolean tensor broadcastable to [B, Jq, Jk], shared
            by all heads.

    Returns:
        Moments with mean [B, Jq, H*Dv] (the concatenated heads, before the
        output projection) in the mode of `q`.

    Raises:
        ValueError: naming `num_heads`, `q`, `k`, `v` or `mask`.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> q = tfp_bnn.moments.Moments(rng.normal(size=[1, 3, 4]), np.full([1, 3, 4], 0.1))
    >>> out = tfp_bnn.moments.multi_head_attention(q, q, q, num_heads=2)
    >>> tuple(out.mean.shape), out.mode
    ((1, 3, 4), 'diagonal')
    """
    q, k, v = _check_qkv(q, k, v)
    num_heads = check.integer("num_heads", num_heads)
    for name, x in (("q", q), ("v", v)):
        if x.mean.shape[-1] % num_heads:
            raise ValueError(
                f"`num_heads`={num_heads} does not divide the width "
                f"{x.mean.shape[-1]} of `{name}`."
            )
    batch_shape = [q.mean.shape[0], q.mean.shape[1], k.mean.shape[1]]
    mask = check_mask(mask, batch_shape)
    if q.mode == "diagonal":
        mean, var, _ = diagonal_attention(q.mean, q.cov, k.mean, k.cov, v.mean, v.cov,
                                          num_heads, mask)
        return Moments(mean, var, q.mode)
    if mask is not None:
        mask = ops.broadcast_to(mask, (ops.shape(q.mean)[0], *batch_shape[1:]))
        mask = ops.reshape(ops.repeat(mask[:, None], num_heads, axis=1), (-1, *batch_shape[1:]))
    heads = scaled_dot_product_attention(
        split_heads(q, num_heads), split_heads(k, num_heads), split_heads(v, num_heads), mask
    )
    return merge_heads(heads, num_heads)

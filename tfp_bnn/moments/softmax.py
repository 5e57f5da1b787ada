"""Softmax over the last axis, linearised at the mean.

First-order Taylor expansion of each row's softmax p = phi(w) around the
row mean:

    E[phi(w_a)]                ~= phi(mu_a)
    Cov[phi(w_a), phi(w_b)]    ~= J_a Cov[w_a, w_b] J_b^T,
    J_a = diag(p_a) - p_a p_a^T,  p_a = phi(mu_a)

(each row is expanded around its own mean). Full mode applies this to
every pair of rows (a, b) of a slice, so cross-row covariance (e.g. from
keys shared by all queries) is propagated. Diagonal mode keeps only Var[phi_i(w_a)] = sum_j J_aij^2 v_aj.

A boolean mask removes positions: masked entries get probability exactly 0
and, since their rows and columns of J are 0, neither carry nor pass on
variance. (`diagonal_variance` evaluates the diagonal rule in O(q) per row
rather than forming J_a.) A row with every position masked has no distribution to put;
it gets probability 0 everywhere (and variance 0) rather than NaN, so the
attention output at such a query is the zero vector.
"""

import numpy as np
from keras import ops

from tfp_bnn.moments._numerics import sum_of_others
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import diagonal_matrix
from tfp_bnn.moments.gaussian import dtype_of
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov


def _broadcasts(shape, target):
    """Whether a static `shape` (None = unknown) broadcasts to `target` without
    growing its rank."""
    if len(shape) > len(target):
        return False
    return all(a is None or b is None or a == b or a == 1 or b == 1
               for a, b in zip(reversed(shape), reversed(target)))


def check_mask(mask, shape, name="mask"):
    """`mask` as a bool tensor broadcast to `shape`; ValueError naming `name`."""
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    if dtype_of(mask) != "bool":
        raise ValueError(f"`{name}` must be boolean (True = attend), got dtype "
                         f"{dtype_of(mask)}.")
    if not _broadcasts(tuple(mask.shape), tuple(shape)):
        raise ValueError(
            f"`{name}` of shape {tuple(mask.shape)} does not broadcast to {list(shape)}."
        )
    return mask


def diagonal_variance(p, v):
    """Var[phi_i(w_a)] = sum_j (J_a)_ij^2 v_aj for diagonal input variances v.

    With (J_a)_ii = p_i - p_i^2 and (J_a)_ij = -p_i p_j (j != i), the sum is

        (p_i - p_i^2)^2 v_i + p_i^2 sum_{j != i} p_j^2 v_j,

    without forming the [B, n, q, q] Jacobian. The sum over j != i is the
    row total minus the own term, in float64: in float32 the difference
    would lose its digits when one term carries nearly the whole row (a
    saturated softmax: relative error ~ q * 6e-8 * total / difference); in
    float64 its error is ~ q * 1e-16 of the row total, so it keeps float32
    precision unless it is below ~ q * 2e-9 of the total (measured cheaper
    under XLA than a product with 1 - I or a cumulative sum, which are
    exact). Where the backend has no float64 (JAX without x64) the sum over
    j != i comes from cumulative sums instead (`_numerics.sum_of_others`).

    Args:
        p: [..., q], the softmax of the mean logits (0 where masked).
        v: [..., q], the variances of the logits.
    """
    p_squared = ops.square(p)
    others = sum_of_others(p_squared * v)
    return ops.square(p - p * p) * v + p_squared * others


def masked_softmax(logits, mask=None):
    """Softmax over the last axis with masked entries exactly 0.

    `mask` (boolean, the shape of `logits`, True = keep) or None. Masked
    logits are set to the lowest finite float, not -inf: an all-masked row
    then softmaxes to a finite uniform row, zeroed afterwards, instead of
    0/0 = NaN.
    """
    if mask is None:
        return ops.softmax(logits, axis=-1)
    lowest = ops.convert_to_tensor(np.finfo(dtype_of(logits)).min, dtype_of(logits))
    logits = ops.where(mask, logits, lowest)
    p = ops.softmax(logits, axis=-1)
    return ops.where(mask, p, ops.zeros_like(p))


def softmax(x: Moments, mask=None) -> Moments:
    """Moments of softmax over the last axis (first-order Taylor).

    Args:
        x: Moments with mean [B, n, q] (rows a = 1..n, logits j = 1..q).
        mask: optional boolean tensor broadcastable to [B, n, q]; True
            keeps a position, False gives it probability 0.

    Returns:
        Moments with mean [B, n, q] (each unmasked row sums to 1) in the
        mode of `x`; cov None if `x` is a constant.

    Raises:
        ValueError: naming `x` or `mask` for bad shapes or dtypes.

    Example:
    >>> p = tfp_bnn.moments.softmax(tfp_bnn.moments.Moments(np.zeros([1, 1, 2]), np.ones([1, 1, 2])))
    >>> np.asarray(p.mean)   # symmetric logits: 1/2 each
    array([[[0.5, 0.5]]], dtype=float32)
    """
    x = as_moments(x, "x", ranks=(3,))
    n, q = x.mean.shape[1:]
    mask = check_mask(mask, x.mean.shape)
    if mask is not None:
        mask = ops.broadcast_to(mask, ops.shape(x.mean))
    p = masked_softmax(x.mean, mask)
    if x.cov is None:
        return Moments(p, None, x.mode)

    if x.mode == "diagonal":
        return Moments(p, diagonal_variance(p, x.cov), x.mode)
    # J_a = diag(p_a) - p_a p_a^T, per row: [B, n, q, q], the softmax Jacobian.
    jac = diagonal_matrix(p) - ops.einsum("bai,baj->baij", p, p)
    c = unflatten_cov(x.cov, (n, q))
    half = ops.einsum("baij,bajcl->baicl", jac, c)
    cov = ops.einsum("baicl,bckl->baick", half, jac)
    return Moments(p, flatten_cov(cov, (n, q)), x.mode)

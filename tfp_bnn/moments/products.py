"""Product of two independent random matrices, and the transpose.

For independent a [n, p] and b [p, q] (per batch element), c = a @ b has,
with m = E, C = Cov:

    E[c_ik] = sum_r ma_ir mb_rk                                   (mean)

    Cov[c_ik, c_jl] = sum_{r,s} (  Cov[a_ir, a_js] Cov[b_rk, b_sl]
                                 + ma_ir ma_js Cov[b_rk, b_sl]
                                 + Cov[a_ir, a_js] mb_rk mb_sl )   (covariance)

These are exact for any distributions with these moments: only
independence of a and b is used, never Gaussianity.

Two easy slips are avoided here. The indices i, j run over the n*q
entries of c (not n*p). And the first term is
tr(S^A_{k1 k2} (S^B_{m1 m2})^T), the first line above; the untransposed
tr(S^A_{k1 k2} S^B_{m1 m2}), which replaces E[a_k2 a_k1^T] by its
transpose S^A_{k1 k2} + mu_k1 mu_k2^T, equals it only when the cross
blocks are symmetric (tested against sampling in
tests/moments/test_products.py, where the untransposed form fails).
It matters for p_h @ v_h in attention: softmax cross blocks are not
symmetric.

Diagonal mode keeps only the variances (all covariances taken as zero):

    Var[c_ik] = sum_r va_ir vb_rk + ma_ir^2 vb_rk + va_ir mb_rk^2
              = (ma^2 @ vb + va @ (mb^2 + vb))_ik
              = ([ma^2, va] @ [vb; mb^2 + vb])_ik      (one product)
"""

from keras import ops

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import add_covariances
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import as_moments_pair
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov


def diagonal_variance(ma, va, mb, vb, product=None, b_axis=-2):
    """Var[a @ b] for independent a, b with diagonal variances (None = constant).

    sum_r va_ir vb_rk + ma_ir^2 vb_rk + va_ir mb_rk^2 = ma^2 @ vb +
    va @ (mb^2 + vb), evaluated as one product [ma^2, va] @ [vb; mb^2 + vb]
    over the doubled contracted axis when both are random.
    `product(x, y)` is the matrix product (e.g. an einsum over head axes;
    None for `keras.ops.matmul`),
    contracting the last axis of x with axis `b_axis` of y. None if both
    are constants.
    """
    product = ops.matmul if product is None else product
    if va is not None and vb is not None:
        return product(ops.concatenate([ops.square(ma), va], axis=-1),
                       ops.concatenate([vb, ops.square(mb) + vb], axis=b_axis))
    terms = []
    if vb is not None:
        terms.append(product(ops.square(ma), vb))
    if va is not None:
        terms.append(product(va, ops.square(mb) if vb is None else ops.square(mb) + vb))
    return add_covariances(*terms)


def matmul(a: Moments, b: Moments) -> Moments:
    """Moments of `a @ b` for independent random matrices (batch first).

    Args:
        a: Moments with mean [B, n, p] (a constant tensor is accepted).
        b: Moments with mean [B, p, q], independent of `a`, same mode.

    Returns:
        Moments of c = a @ b: mean [B, n, q]; cov [B, n*q, n*q] (full) or
        [B, n, q] (diagonal); None if both inputs are constants.

    Raises:
        ValueError: naming `a` or `b` for wrong ranks, mismatched inner
            dimensions or modes.

    Example:
    >>> a = tfp_bnn.moments.Moments(np.ones([1, 1, 2]), np.full([1, 1, 2], 0.1))
    >>> c = tfp_bnn.moments.matmul(a, np.ones([1, 2, 1]))   # b a constant
    >>> np.ravel(c.mean), np.ravel(c.cov)   # sum_p a_p, sum_p Var[a_p]
    (array([2.], dtype=float32), array([0.2], dtype=float32))
    """
    a, b = as_moments_pair(a, b, ("a", "b"), ranks=(3,))
    mode = a.mode
    n, p = a.mean.shape[1:]
    p_b, q = b.mean.shape[1:]
    if p != p_b:
        raise ValueError(
            f"`b` has {p_b} rows but `a` has {p} columns (a: {tuple(a.mean.shape)}, "
            f"b: {tuple(b.mean.shape)})."
        )
    ma, mb = a.mean, b.mean
    mean = ops.matmul(ma, mb)
    if a.cov is None and b.cov is None:
        return Moments(mean, None, mode)
    if mode == "diagonal":
        return Moments(mean, diagonal_variance(ma, a.cov, mb, b.cov), mode)

    # The covariance of the module docstring, on [B, n, p, n, p] and
    # [B, p, q, p, q] views; einsum never forms a Kronecker product.
    ca = None if a.cov is None else unflatten_cov(a.cov, (n, p))
    cb = None if b.cov is None else unflatten_cov(b.cov, (p, q))
    terms = []
    if ca is not None and cb is not None:
        terms.append(ops.einsum("birjs,brksl->bikjl", ca, cb))
    if cb is not None:
        half = ops.einsum("bir,brksl->biksl", ma, cb)
        terms.append(ops.einsum("bjs,biksl->bikjl", ma, half))
    if ca is not None:
        half = ops.einsum("birjs,brk->bikjs", ca, mb)
        terms.append(ops.einsum("bikjs,bsl->bikjl", half, mb))
    return Moments(mean, flatten_cov(add_covariances(*terms), (n, q)), mode)


def transpose(m: Moments) -> Moments:
    """Moments of the matrix transpose (swap of the last two axes).

    In full mode the covariance is re-indexed: entry (i, r), flat index
    i*p + r of the [n, p] slice, moves to (r, i), flat index r*n + i
    (the same re-indexing as for a column-stacking vec).

    Args:
        m: Moments with mean [B, n, p].

    Returns:
        Moments with mean [B, p, n] and the re-indexed covariance.

    Example:
    >>> m = tfp_bnn.moments.Moments(np.arange(6.0).reshape([1, 2, 3]), np.ones([1, 2, 3]))
    >>> np.asarray(tfp_bnn.moments.transpose(m).mean)
    array([[[0., 3.],
            [1., 4.],
            [2., 5.]]], dtype=float32)
    """
    m = as_moments(m, "m", ranks=(3,))
    n, p = m.mean.shape[1:]
    mean = ops.transpose(m.mean, (0, 2, 1))
    if m.cov is None:
        return Moments(mean, None, m.mode)
    if m.mode == "diagonal":
        return Moments(mean, ops.transpose(m.cov, (0, 2, 1)), m.mode)
    cov = ops.transpose(unflatten_cov(m.cov, (n, p)), (0, 2, 1, 4, 3))
    return Moments(mean, flatten_cov(cov, (p, n)), m.mode)

"""A dense layer with a mean-field Gaussian kernel and bias.

y = x @ W + b over the last axis, with W [I, O] of independent entries
(mean M, variance S), b [O] independent (variance s_b), both independent
of x (mean m, covariance C). This is the product rule of
`tfp_bnn.moments.products` with a = x and b = W; the mean-field kernel
makes Cov[W_ia, W_lc] = delta_il delta_ac S_ia, so the sums collapse to:

    E[y_ja] = sum_i m_ji M_ia + E[b_a]

    Cov[y_ja, y_kc] = sum_{i,l} M_ia M_lc C_{ji,kl}
                    + delta_ac sum_i S_ia (C_{ji,ki} + m_ji m_ki)
                    + delta_ac s_b_a

for all token pairs (j, k). The kernel is shared by the tokens, so the
second and third terms couple different tokens even when x is a constant
(C = 0): the product covariance with Cov[x] = 0 keeps cross-token covariance. Diagonal
mode keeps j = k, a = c:

    Var[y_ja] = sum_i M_ia^2 v_ji + S_ia (v_ji + m_ji^2) + s_b_a
              = (v @ (M^2 + S) + m^2 @ S)_ja + s_b_a        (two products)

Both are exact (independence is all they use).
"""

from keras import ops

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import add_covariances
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import to_float32
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov
from tfp_bnn.moments.gaussian import vector_or_none


def check_dense_params(kernel_loc, kernel_var, bias_loc, bias_var, input_size, name=""):
    """Converts and checks dense parameters; errors name the argument.

    Args:
        kernel_loc, kernel_var: [input_size, O]; `kernel_var` may be None
            (a deterministic kernel).
        bias_loc, bias_var: [O] or None (no bias / a deterministic bias).
        input_size: the width I of the input.
        name: a prefix for error messages, e.g. "params['query'] ".

    Returns:
        The four values as float32 tensors (or None).
    """
    kernel_loc = to_float32(kernel_loc)
    if len(kernel_loc.shape) != 2 or kernel_loc.shape[0] != input_size:
        raise ValueError(
            f"{name}`kernel_loc` must have shape ({input_size}, units) to match the "
            f"input width {input_size}, got {tuple(kernel_loc.shape)}."
        )
    if kernel_var is not None:
        kernel_var = to_float32(kernel_var)
        if tuple(kernel_var.shape) != tuple(kernel_loc.shape):
            raise ValueError(
                f"{name}`kernel_var` must have the shape of `kernel_loc` "
                f"{tuple(kernel_loc.shape)}, got {tuple(kernel_var.shape)}."
            )
    units = kernel_loc.shape[1]
    bias_loc = vector_or_none(bias_loc, name + "bias_loc", units)
    bias_var = vector_or_none(bias_var, name + "bias_var", units)
    if bias_loc is None and bias_var is not None:
        raise ValueError(f"{name}`bias_var` is given but `bias_loc` is None.")
    return kernel_loc, kernel_var, bias_loc, bias_var


def times_kernel(x, kernel):
    """x [..., I] @ kernel [I, O], as one batched product over the leading axes.

    On TensorFlow `keras.ops.matmul` turns a rank-3 by rank-2 product into a
    tensordot ([B*J, I] @ [I, O]), which rounds differently from TensorFlow's
    batched product; a batch of one kernel keeps the batched product, so
    the results are those TensorFlow gave before the moments were in
    `keras.ops`.
    """
    if len(x.shape) > 2:
        kernel = ops.expand_dims(kernel, 0)
    return ops.matmul(x, kernel)


def diagonal_variance(m, v, kernel_loc, kernel_var, bias_var=None):
    """Var[x @ W + b] over the last axis for diagonal input variances.

    sum_i M_ia^2 v_ji + S_ia (v_ji + m_ji^2) + s_b_a, as the two products
    v @ (M^2 + S) + m^2 @ S (one for a constant x, v None; a None
    `kernel_var` or `bias_var` is deterministic). Returns None if
    everything is deterministic.
    """
    terms = []
    if v is not None:
        square = ops.square(kernel_loc)
        terms.append(times_kernel(v, square if kernel_var is None else square + kernel_var))
    if kernel_var is not None:
        terms.append(times_kernel(ops.square(m), kernel_var))
    if bias_var is not None:
        if not terms:
            return ops.broadcast_to(bias_var, (*ops.shape(m)[:-1], bias_var.shape[-1]))
        terms.append(bias_var)  # broadcast over the rows
    var = None
    for term in terms:
        var = term if var is None else var + term
    return var


def dense(x: Moments, kernel_loc, kernel_var, bias_loc=None, bias_var=None) -> Moments:
    """Moments of `x @ W + b` for a mean-field Gaussian W and b.

    Args:
        x: Moments with mean [B, J, I] or [B, I] (a constant tensor is
            accepted and becomes a diagonal-mode constant).
        kernel_loc: [I, O], the means M of the kernel.
        kernel_var: [I, O], the per-weight variances S, or None.
        bias_loc: [O] or None (no bias).
        bias_var: [O] or None (a deterministic bias).

    Returns:
        Moments with mean [B, J, O] (or [B, O]) in the mode of `x`; cov
        None only if x, the kernel and the bias are all deterministic.

    Raises:
        ValueError: naming the argument whose shape does not fit.

    Example:
    >>> x = tfp_bnn.moments.Moments.deterministic(np.ones([1, 2]))
    >>> y = tfp_bnn.moments.dense(x, kernel_loc=np.ones([2, 3]), kernel_var=np.full([2, 3], 0.1))
    >>> np.asarray(y.mean), np.asarray(y.cov)   # sum_i x_i M_io, sum_i x_i^2 S_io
    (array([[2., 2., 2.]], dtype=float32), array([[0.2, 0.2, 0.2]], dtype=float32))
    """
    x = as_moments(x, "x")
    kernel_loc, kernel_var, bias_loc, bias_var = check_dense_params(
        kernel_loc, kernel_var, bias_loc, bias_var, x.mean.shape[-1]
    )
    rank = len(x.mean.shape)
    units = kernel_loc.shape[1]
    m = x.mean
    mean = times_kernel(m, kernel_loc)
    if bias_loc is not None:
        mean = mean + bias_loc
    if x.cov is None and kernel_var is None and bias_var is None:
        return Moments(mean, None, x.mode)

    if x.mode == "diagonal":
        var = diagonal_variance(m, x.cov, kernel_loc, kernel_var, bias_var)
        return Moments(mean, var, x.mode)

    # A vector [B, I] is a sequence of one token: the same algebra applies.
    tokens = m.shape[1] if rank == 3 else 1
    width = m.shape[-1]
    m3 = ops.reshape(m, (-1, tokens, width))
    terms = []
    if x.cov is not None:
        c = unflatten_cov(x.cov, (tokens, width))
        half = ops.einsum("bjikl,lc->bjikc", c, kernel_loc)
        terms.append(ops.einsum("bjikc,ia->bjakc", half, kernel_loc))
    # The weight-noise and bias terms are diagonal in the unit (a = c) but
    # couple every pair of tokens (j, k): collect them as [B, J, J, O].
    shared = []
    if kernel_var is not None:
        second = ops.einsum("bji,bki->bjki", m3, m3)
        if x.cov is not None:
            c_tokens = ops.transpose(unflatten_cov(x.cov, (tokens, width)), (0, 1, 3, 2, 4))
            second = second + ops.diagonal(c_tokens, axis1=-2, axis2=-1)
        shared.append(ops.einsum("bjki,ia->bjka", second, kernel_var))
    if bias_var is not None:
        shared.append(ops.broadcast_to(bias_var, (ops.shape(m)[0], tokens, tokens, units)))
    if shared:
        eye = ops.eye(units, dtype=m.dtype)
        terms.append(ops.einsum("bjka,ac->bjakc", add_covariances(*shared), eye))
    cov = flatten_cov(add_covariances(*terms), (tokens, units))
    return Moments(mean, cov, x.mode)

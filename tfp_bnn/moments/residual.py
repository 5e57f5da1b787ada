"""The residual connection x + y on moments, with the branches' cross-covariance.

    E[x + y]   = E[x] + E[y]
    Cov[x + y] = Cov[x] + Cov[y] + Cov[x, y] + Cov[x, y]^T

Dropping Cov[x, y], as a plain moment-propagation scheme does, is exact when
the branches are independent, e.g. the attention residual a + x of a
constant x (Cov[x] = 0). In a transformer block the branch is computed
from its input, so for a random input the cross term is not zero: `add`
takes it as `cross`. Both cross terms below come from Stein's lemma,
Cov[f(w), w] = E[grad f(w)] Cov[w] for a Gaussian w, with the expected
Jacobian taken at the means (first order), weights independent of the
input.

Feed-forward residual y + z, y = relu(z W1 + b1) W2 + b2 (z,
the first LayerNorm's output, is always random): the linear maps act
through their means M1, M2 exactly, and for the ReLU Stein's lemma gives
Cov[relu(h_jk), w] = Phi_jk Cov[h_jk, w] (h, w jointly Gaussian, the ReLU
rule's own assumption), Phi_jk = Phi(m_jk / s_jk) the expected slope
("exact"; 1[m_jk > 0] for "taylor"). The slopes' dependence on W1 is
neglected (first order):

    Cov[y_j, z_k] = L_j C_z,jk,   L_j = M2^T diag(Phi_j) M1^T   [I, I]

for every token pair (j, k); diagonal mode needs only, for diagonal C_z,
Cov[y_ji, z_ji] = v_z,ji sum_k M1[i, k] Phi_jk M2[k, i].
`feed_forward_cross_covariance` computes it.

Attention residual a + x for a random x (a later block), a = sum_h P_h
(x W_v,h + b_v,h) W_o,h + b_o: with the attention weights P_h at their
mean (the softmax of the mean scores, as `softmax` linearises), the value
path is linear in x:

    Cov[a_j, x_k] = sum_l L_jl C_x,lk,   L = sum_h L_h,
    (L_h)_jl = (P_h)_jl T_h,   T_h = (V_h O_h)^T            [I, I]

(V, O the mean value and output kernels). `multi_head_attention` treats
the heads as independent, so the propagated Cov[a] lacks the same path's
cross-head part sum_{h != g} L_h C_x L_g^T, which
`attention_value_correlations` returns with the cross term and
`transformer_block` adds to Cov[a]. The score path (q and k depend on x
too) is left out: its first-order terms are consistent only with the
q-k-v correlations that the attention rule drops, and with them the
residual covariance can lose positive semi-definiteness. Measured on the
second block of test_transformer.py (full mode, linearised LayerNorms,
output variance error): 0.201 without cross terms; 0.260 with the
feed-forward one only; adding the attention one through the value and
score paths 0.152, through the value path alone 0.138, and with its
cross-head part as well 0.114 (the default, which also guarantees
positive semi-definiteness).

Positive semi-definiteness (full mode). The propagated covariance of each
branch is at least L C L^T (for the attention branch after the cross-head
part is added; the weight-noise, ReLU and softmax terms only add to it),
so [[Cov[y], L C], [C L^T, C]] is at least [L; I] C [L; I]^T plus a PSD
part, and Cov[x + y] = Cov[y] + C + L C + C L^T >= (L + I) C (L + I)^T.
"""

import math

from keras import ops

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import add_covariances
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import as_moments_pair
from tfp_bnn.moments.gaussian import compatible
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import to_float32
from tfp_bnn.moments.gaussian import unflatten_cov
from tfp_bnn.moments.softmax import masked_softmax


def bounded_cross(cross, var_x, var_y):
    """Clips first-order cross-covariances to the Cauchy-Schwarz bound |c| <= sqrt(vx vy).

    In diagonal mode the variances and the cross term come from different
    approximations (the variances drop every covariance between units, the
    cross term sums over them), so vx + vy + 2c can come out negative — a
    NaN in training once the posterior widens. Any valid covariance obeys
    the bound, and with it vx + vy + 2c >= (sqrt(vx) - sqrt(vy))^2 >= 0.
    Within the bound the value is unchanged.
    """
    if var_x is None or var_y is None:
        return ops.zeros_like(cross)
    # maximum() keeps the gradient finite where one branch is a constant.
    limit = ops.sqrt(ops.maximum(var_x * var_y, 1e-30))
    return ops.clip(cross, -limit, limit)


def add(x: Moments, y: Moments, cross=None) -> Moments:
    """Moments of x + y (either may be a constant).

    Args:
        x: Moments (or a constant tensor) with mean [B, J, I] or [B, I].
        y: Moments (or a constant tensor) of the same shape and mode.
        cross: Cov[x, y], or None for independent x and y. Mode "full":
            [B, N, N] with cross[b, u, v] = Cov[x_u, y_v] over the
            row-major flattening; mode "diagonal": Cov[x_u, y_u] in the
            shape of the mean.

    Returns:
        Moments of the sum; cov None if both are constants and `cross`
        is None.

    Raises:
        ValueError: naming `x` and `y` if their shapes or modes differ, or
            `cross` if its shape is wrong.

    Example:
    >>> x = tfp_bnn.moments.Moments(np.ones([1, 2]), np.full([1, 2], 0.5))
    >>> y = tfp_bnn.moments.Moments(np.ones([1, 2]), np.full([1, 2], 0.25))
    >>> z = tfp_bnn.moments.add(x, y)   # independent: the variances add
    >>> np.asarray(z.mean), np.asarray(z.cov)
    (array([[2., 2.]], dtype=float32), array([[0.75, 0.75]], dtype=float32))
    """
    x, y = as_moments_pair(x, y, ("x", "y"))
    if not compatible(x.mean.shape, y.mean.shape):
        raise ValueError(
            f"`x` of shape {tuple(x.mean.shape)} and `y` of shape {tuple(y.mean.shape)} must "
            "have the same shape."
        )
    mean = x.mean + y.mean
    cov = add_covariances(x.cov, y.cov)
    if cross is not None:
        cross = to_float32(cross)
        expected = (tuple(x.mean.shape) if x.mode == "diagonal"
                    else (x.mean.shape[0], x.event_size, x.event_size))
        if not compatible(cross.shape, expected):
            raise ValueError(
                f"`cross` must have shape {expected} in mode {x.mode!r}, got "
                f"{tuple(cross.shape)}."
            )
        if x.mode == "diagonal":
            both = 2.0 * bounded_cross(cross, x.variance() if x.cov is not None else None,
                                       y.variance() if y.cov is not None else None)
        else:
            both = cross + ops.transpose(cross, (0, 2, 1))
        cov = add_covariances(cov, both)
    return Moments(mean, cov, x.mode)


def feed_forward_cross_covariance(z: Moments, slope, kernel1_loc, kernel2_loc):
    """Cov[y, z] for y = relu(z W1 + b1) W2 + b2, to first order (see module).

    Args:
        z: Moments with mean [B, J, I] or [B, I], the feed-forward input.
        slope: [B, J, F] (or [B, F]), the expected ReLU slope Phi of each
            hidden unit (`tfp_bnn.moments.relu.rectified_gaussian`).
        kernel1_loc: [I, F], the mean of W1.
        kernel2_loc: [F, I], the mean of W2.

    Returns:
        None if `z` is a constant (the branches are then independent);
        else Cov[y, z] in the layout of `add`'s `cross`.
    """
    z = as_moments(z, "z")
    if z.cov is None:
        return None
    width = z.mean.shape[-1]
    tokens = z.mean.shape[1] if len(z.mean.shape) == 3 else 1
    slope = ops.reshape(to_float32(slope), (-1, tokens, kernel1_loc.shape[1]))
    if z.mode == "diagonal":
        paired = ops.transpose(kernel1_loc) * kernel2_loc  # [F, I]: M1[i, k] M2[k, i]
        gain = ops.einsum("bjk,ki->bji", slope, paired)
        return z.cov * ops.reshape(gain, ops.shape(z.mean))
    maps = ops.einsum("ik,bjk,ka->bjai", kernel1_loc, slope, kernel2_loc)  # L_j [B, J, I, I]
    c = unflatten_cov(z.cov, (tokens, width))
    return flatten_cov(ops.einsum("bjai,bjikl->bjakl", maps, c), (tokens, width))


def diagonal_value_correlations(x_var, p, value_kernel, output_kernel, num_heads):
    """Diagonal mode of `attention_value_correlations`, from the attention weights.

    Args:
        x_var: [B, J, I], the variances of the block input x.
        p: [B, H, J, J], the attention weights at the mean scores (as
            `tfp_bnn.moments.attention.diagonal_attention` returns them).
        value_kernel: [I, H*Dv], the mean of W_v.
        output_kernel: [H*Dv, I], the mean of W_o.
        num_heads: H.

    Returns:
        (cross, heads): Cov[a_ji, x_ji] [B, J, I], and the variances that
        the cross-head part sum_{h != g} L_h C_x L_g^T adds to a, [B, J, I]
        (None for one head).
    """
    width = x_var.shape[-1]
    value_dim = value_kernel.shape[-1] // num_heads
    w_v = ops.reshape(value_kernel, (width, num_heads, value_dim))
    w_o = ops.reshape(output_kernel, (num_heads, value_dim, width))
    maps = ops.einsum("ihd,hdo->hoi", w_v, w_o)  # T_h = (W_v,h W_o,h)^T: [H, I_out, I_in]
    cross = x_var * ops.einsum("bhj,hi->bji", ops.diagonal(p, axis1=-2, axis2=-1),
                               ops.diagonal(maps, axis1=-2, axis2=-1))
    if num_heads == 1:
        return cross, None
    # sum_{h != g} sum_{l,i} p_hjl p_gjl v_li T_hoi T_goi; the summand is
    # symmetric in (h, g), so twice the sum over the P = H (H - 1) / 2 pairs
    # h < g, in two steps (memory B P J (J + I), not B P J^2 I^2).
    pairs = [(h, g) for h in range(num_heads) for g in range(h + 1, num_heads)]
    weights = ops.stack([p[:, h] * p[:, g] for h, g in pairs], axis=1)  # [B, P, J, J]
    products = ops.stack([maps[h] * maps[g] for h, g in pairs])  # [P, I_out, I_in]
    weighted = ops.einsum("bnjl,bli->bnji", weights, x_var)
    heads = 2.0 * ops.einsum("bnji,noi->bjo", weighted, products)
    return cross, heads


def attention_value_correlations(x: Moments, q_mean, k_mean, value_kernel, output_kernel,
                                 num_heads, mask=None):
    """Cov[a, x] and the cross-head covariance of a, through the value path.

    a = sum_h softmax(q_h k_h^T / sqrt(K)) (x W_v,h + b_v,h) W_o,h + b_o, the
    attention branch of the residual a + x, with the attention weights
    fixed at their mean (see the module docstring).

    Args:
        x: Moments with mean [B, J, I], the block input.
        q_mean, k_mean: [B, J, H*K], the means of the projected queries and
            keys (head-major columns).
        value_kernel: [I, H*Dv], the mean of W_v.
        output_kernel: [H*Dv, I], the mean of W_o.
        num_heads: H.
        mask: optional boolean tensor broadcastable to [B, J, J].

    Returns:
        (cross, heads): None, None for a constant `x`; else `cross` =
        Cov[a, x] in the layout of `add`'s `cross` and `heads` = sum over
        head pairs h != g of L_h C_x L_g^T, the covariance the independent
        heads of `multi_head_attention` drop, in the layout of a's
        covariance (the variances in diagonal mode).
    """
    x = as_moments(x, "x", ranks=(3,))
    if x.cov is None:
        return None, None
    tokens, width = x.mean.shape[1:]
    key_dim = q_mean.shape[-1] // num_heads
    value_dim = value_kernel.shape[-1] // num_heads
    q = ops.reshape(q_mean, (-1, tokens, num_heads, key_dim))
    k = ops.reshape(k_mean, (-1, tokens, num_heads, key_dim))
    scores = ops.einsum("bjhd,bthd->bhjt", q, k) / math.sqrt(key_dim)
    if mask is not None:
        mask = ops.broadcast_to(mask, (ops.shape(scores)[0], tokens, tokens))
        mask = ops.broadcast_to(mask[:, None], ops.shape(scores))
    p = masked_softmax(scores, mask)  # [B, H, J, T]
    if x.mode == "diagonal":
        cross, heads = diagonal_value_correlations(x.cov, p, value_kernel, output_kernel,
                                                   num_heads)
        return cross, ops.zeros_like(cross) if heads is None else heads
    w_v = ops.reshape(value_kernel, (width, num_heads, value_dim))
    w_o = ops.reshape(output_kernel, (num_heads, value_dim, width))
    maps = ops.einsum("ihd,hdo->hoi", w_v, w_o)  # T_h = (W_v,h W_o,h)^T: [H, I_out, I_in]

    def right(half, g):  # half L_g^T, (L_g)_{nc,km} = p_gnk (T_g)_cm
        return ops.einsum("cm,bjokm->bjokc", maps[g],
                          ops.einsum("bnk,bjokm->bjonm", p[:, g], half))

    c = unflatten_cov(x.cov, (tokens, width))
    # L_h C per head, one at a time (H static; no [B, H, J, I, J, I] tensor),
    # and sum_{h != g} L_h C L_g^T = (L C) L^T - sum_h (L_h C) L_h^T.
    cross, own = 0.0, 0.0
    for h in range(num_heads):
        half = ops.einsum("oi,bjikm->bjokm", maps[h],
                          ops.einsum("bjl,blikm->bjikm", p[:, h], c))
        cross += half
        own += right(half, h)
    heads = -own
    for g in range(num_heads):
        heads += right(cross, g)
    shape = (tokens, width)
    return flatten_cov(cross, shape), flatten_cov(heads, shape)

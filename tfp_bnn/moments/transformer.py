"""One Bayesian transformer block, propagated in moments (Vaswani et al. 2017).

Post-norm encoder block, as keras.layers.MultiHeadAttention followed by
keras.layers.LayerNormalization and a ReLU feed-forward network:

    q, k, v = dense(x, query), dense(x, key), dense(x, value)
    a = dense(multi_head_attention(q, k, v), output)
    z = layer_norm(a + x, norm1)
    y = dense(relu(dense(z, ffn1)), ffn2)
    out = layer_norm(y + z, norm2)

By default the LayerNorms are linearised with their full Jacobian
(`layer_norm_method="linearized"`) and the residual sums keep their
branches' first-order cross-covariance (`residual_covariance=True`;
`tfp_bnn.moments.residual`): the feed-forward one always, the attention
one (value path, plus the heads' cross-covariance through it) when x is
random. `layer_norm_method="constant", residual_covariance=False` is the
plain first-order scheme (the behaviour before these options).

Every weight matrix has a mean-field Gaussian posterior, given by its
means and per-weight variances; the stages and their approximations are
documented in their modules and listed in `tfp_bnn.moments`.

Diagonal mode evaluates the same rules on plain tensors in one pass
(`_diagonal_block`): one product for q, k and v, the heads kept in place,
the attention weights at the mean shared by the attention and its residual
cross term, O(J^2) softmax variances, two products per random matrix
product instead of three. It agrees with composing the stage functions to
float32 rounding (tests/integration/test_moments_diagonal_reference.py) and is about
twice as fast under XLA.
"""

import keras
from keras import ops

from tfp_bnn import _validation as check

from tfp_bnn.moments.attention import diagonal_attention
from tfp_bnn.moments.attention import multi_head_attention
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import check_mode
from tfp_bnn.moments.gaussian import to_float32
from tfp_bnn.moments.layer_norm import METHODS as NORM_METHODS
from tfp_bnn.moments.layer_norm import diagonal_layer_norm
from tfp_bnn.moments.layer_norm import layer_norm
from tfp_bnn.moments.linear import check_dense_params
from tfp_bnn.moments.linear import dense
from tfp_bnn.moments.linear import diagonal_variance as dense_variance
from tfp_bnn.moments.linear import times_kernel
from tfp_bnn.moments.memory import check_full_covariance
from tfp_bnn.moments.relu import METHODS as RELU_METHODS
from tfp_bnn.moments.relu import rectified_gaussian
from tfp_bnn.moments.relu import relu as relu_moments
from tfp_bnn.moments.residual import add
from tfp_bnn.moments.residual import attention_value_correlations
from tfp_bnn.moments.residual import diagonal_value_correlations
from tfp_bnn.moments.residual import bounded_cross
from tfp_bnn.moments.residual import feed_forward_cross_covariance
from tfp_bnn.moments.softmax import check_mask

PARAM_KEYS = ("query", "key", "value", "output", "norm1", "ffn1", "ffn2", "norm2")


def _check_params(params, width, num_heads, key_dim, value_dim):
    """Converts `params` and checks every shape; returns (params, ff_dim)."""
    if not isinstance(params, dict):
        raise ValueError(f"`params` must be a dict with keys {PARAM_KEYS}, got {type(params)}.")
    missing = [key for key in PARAM_KEYS if key not in params]
    if missing:
        raise ValueError(f"`params` is missing the keys {missing}; it needs {PARAM_KEYS}.")
    for key in PARAM_KEYS:
        if not isinstance(params[key], (tuple, list)) or len(params[key]) != 4:
            raise ValueError(
                f"`params['{key}']` must be a tuple (kernel_loc, kernel_var, bias_loc, "
                f"bias_var), got {params[key]!r:.80}."
            )
    checked = {}
    # (rows, columns, what the columns must be) of each attention kernel,
    # checked in data-flow order so the first error is the root cause.
    attention = (("query", width, num_heads * key_dim, "num_heads * key_dim"),
                 ("key", width, num_heads * key_dim, "num_heads * key_dim"),
                 ("value", width, num_heads * value_dim, "num_heads * value_dim"),
                 ("output", num_heads * value_dim, width, "the width of `x`"))
    for key, rows, units, what in attention:
        checked[key] = check_dense_params(*params[key], rows, name=f"params['{key}'] ")
        got = checked[key][0].shape[1]
        if got != units:
            raise ValueError(
                f"`params['{key}']` kernel has {got} columns, expected {what} = {units}."
            )
    checked["ffn1"] = check_dense_params(*params["ffn1"], width, name="params['ffn1'] ")
    ff_dim = checked["ffn1"][0].shape[1]
    checked["ffn2"] = check_dense_params(*params["ffn2"], ff_dim, name="params['ffn2'] ")
    if checked["ffn2"][0].shape[1] != width:
        raise ValueError(
            f"`params['ffn2']` kernel has {checked['ffn2'][0].shape[1]} columns, expected "
            f"the width of `x` = {width}."
        )
    for key in ("norm1", "norm2"):
        parts = []
        for index, part in enumerate(("gamma_loc", "gamma_var", "beta_loc", "beta_var")):
            value = params[key][index]
            if value is not None:
                value = to_float32(value)
                if tuple(value.shape) != (width,):
                    raise ValueError(
                        f"`params['{key}']` {part} must have shape ({width},), "
                        f"got {tuple(value.shape)}."
                    )
            parts.append(value)
        checked[key] = tuple(parts)
    return checked, ff_dim


def _plus(a, b):
    """a + b where None stands for zero (None if both are)."""
    if a is None or b is None:
        return b if a is None else a
    return a + b


def _concat_columns(parts, sizes):
    """The vectors or kernels `parts` side by side (None: zeros); None if all are None."""
    if all(part is None for part in parts):
        return None
    return ops.concatenate([ops.zeros(size, "float32") if part is None else part
                            for part, size in zip(parts, sizes)], axis=-1)


def _dense_diagonal(mean, var, kernel_loc, kernel_var, bias_loc, bias_var):
    """`dense` in diagonal mode on plain tensors (var None: a constant)."""
    out = times_kernel(mean, kernel_loc)
    if bias_loc is not None:
        out = out + bias_loc
    return out, dense_variance(mean, var, kernel_loc, kernel_var, bias_var)


def _diagonal_block(x, params, num_heads, mask, epsilon, relu, layer_norm_method,
                    residual_covariance):
    """`transformer_block` in diagonal mode, the stages fused on plain tensors.

    The same rules, term by term, as composing `dense`, `multi_head_attention`,
    `attention_value_correlations`, `add`, `layer_norm`, `relu` and
    `feed_forward_cross_covariance` (what full mode does), rearranged for
    speed only: q, k and v are one product with the three kernels side by
    side, the heads stay in place (einsums over a head axis instead of
    moving them into the batch), the attention weights at the mean scores
    are computed once for the attention and its residual cross term, and
    the ReLU's expected slopes come from the same rectified-Gaussian pass
    as its moments. Returns the block output's (mean, variances).
    """
    m, v = x.mean, x.cov
    width = m.shape[-1]
    keys = ("query", "key", "value")
    shapes = [tuple(params[key][0].shape) for key in keys]
    units = [shape[1] for shape in shapes]
    with keras.name_scope("qkv"):
        qkv_mean, qkv_var = _dense_diagonal(
            m, v,
            ops.concatenate([params[key][0] for key in keys], axis=1),
            _concat_columns([params[key][1] for key in keys], shapes),
            _concat_columns([params[key][2] for key in keys], [[n] for n in units]),
            _concat_columns([params[key][3] for key in keys], [[n] for n in units]))
    parts = []
    for start, stop in ((0, units[0]), (units[0], units[0] + units[1]),
                        (units[0] + units[1], sum(units))):
        parts += [qkv_mean[..., start:stop], None if qkv_var is None else qkv_var[..., start:stop]]
    with keras.name_scope("attention"):
        heads_mean, heads_var, weights = diagonal_attention(*parts, num_heads, mask)
    with keras.name_scope("output"):
        a_mean, a_var = _dense_diagonal(heads_mean, heads_var, *params["output"])
    with keras.name_scope("residual1"):
        cross = None
        if residual_covariance and v is not None:
            cross, between_heads = diagonal_value_correlations(
                v, weights, params["value"][0], params["output"][0], num_heads)
            a_var = _plus(a_var, between_heads)
        total_var = _plus(a_var, v)
        if cross is not None:
            total_var = total_var + 2.0 * bounded_cross(cross, a_var, v)

    def norm(mean, var, gamma_loc, gamma_var, beta_loc, beta_var):
        if gamma_loc is None:
            gamma_loc = ops.ones((width,), "float32")
        return diagonal_layer_norm(mean, var, gamma_loc, gamma_var, beta_loc, beta_var,
                                   epsilon, True, layer_norm_method)

    with keras.name_scope("norm1"):
        z_mean, z_var = norm(a_mean + m, total_var, *params["norm1"])
    with keras.name_scope("ffn1"):
        pre_mean, pre_var = _dense_diagonal(z_mean, z_var, *params["ffn1"])
    with keras.name_scope("relu"):
        if pre_var is None:
            hidden_mean, hidden_var = ops.relu(pre_mean), None
            slope = ops.cast(pre_mean > 0, pre_mean.dtype)
        elif relu == "exact":
            hidden_mean, hidden_var, slope = rectified_gaussian(pre_mean, pre_var)
        else:
            hidden_mean = ops.relu(pre_mean)
            slope = ops.cast(pre_mean > 0, pre_mean.dtype)
            hidden_var = pre_var * slope
    with keras.name_scope("ffn2"):
        y_mean, y_var = _dense_diagonal(hidden_mean, hidden_var, *params["ffn2"])
    with keras.name_scope("residual2"):
        total_var = _plus(y_var, z_var)
        if residual_covariance and z_var is not None:
            # `feed_forward_cross_covariance`, diagonal mode.
            paired = ops.transpose(params["ffn1"][0]) * params["ffn2"][0]  # M1[i, k] M2[k, i]
            total_var = total_var + 2.0 * bounded_cross(z_var * times_kernel(slope, paired),
                                                        y_var, z_var)
    with keras.name_scope("norm2"):
        return norm(y_mean + z_mean, total_var, *params["norm2"])


def transformer_block(
    x,
    params,
    num_heads,
    key_dim,
    value_dim=None,
    mode="diagonal",
    attention_mask=None,
    epsilon=1e-3,
    relu="exact",
    max_bytes=2**31,
    layer_norm_method="linearized",
    residual_covariance=True,
) -> Moments:
    """Mean and covariance of one post-norm transformer block's output.

    Args:
        x: a float32 tensor [B, J, I] (a constant input) or Moments of the
            same shape in mode `mode` (e.g. the previous block's output).
        params: dict with keys "query", "key", "value", "output", "norm1",
            "ffn1", "ffn2", "norm2", each a tuple (kernel_loc, kernel_var,
            bias_loc, bias_var) as `BayesianLayer.posterior_moments()`
            returns; bias entries may be None (no bias / deterministic) and
            kernel_var None (deterministic). Kernels: query and key
            [I, H*key_dim], value [I, H*value_dim], output [H*value_dim, I],
            ffn1 [I, F], ffn2 [F, I]; for the norms kernel = gain [I] and
            bias = beta [I]. Heads are head-major in the columns.
        num_heads: H.
        key_dim: K, the size of each query and key head.
        value_dim: Dv, the size of each value head (default `key_dim`).
        mode: "diagonal" (variances only, memory linear in J*I) or "full"
            (all covariances, memory up to B*J^4*H; checked first).
        attention_mask: optional boolean tensor broadcastable to [B, J, J],
            True where a query may attend to a key.
        epsilon: LayerNorm epsilon (Keras default 1e-3).
        relu: "exact" or "taylor", see `tfp_bnn.moments.relu`.
        max_bytes: the full-mode budget for one covariance tensor, see
            `check_full_covariance`.
        layer_norm_method: "linearized" (default) or "constant", see
            `tfp_bnn.moments.layer_norm`.
        residual_covariance: if True (default), the feed-forward residual
            y + z keeps the first-order Cov[y, z] (see
            `tfp_bnn.moments.residual`); False treats y and z as
            independent.

    Returns:
        Moments with mean [B, J, I] in `mode`.

    Raises:
        ValueError: naming the offending argument, before anything is
            computed: bad mode, relu or layer_norm method, shapes of `x`, `params` or
            `attention_mask`, or a full-mode request over `max_bytes`.

    Example:
    >>> block = tfp_bnn.layers.BayesianTransformerBlock(num_heads=2, ff_dim=8, kl_weight=1e-3)
    >>> x = np.random.default_rng(0).normal(size=[2, 3, 4]).astype("float32")
    >>> _ = block(x)   # builds the weights
    >>> out = tfp_bnn.moments.transformer_block(x, block.moment_parameters(), num_heads=2,
    ...                                         key_dim=2)
    >>> tuple(out.mean.shape), tuple(out.cov.shape)   # mode "diagonal": one variance per output
    ((2, 3, 4), (2, 3, 4))
    """
    check_mode(mode)
    check.one_of("relu", relu, RELU_METHODS)
    check.one_of("layer_norm_method", layer_norm_method, NORM_METHODS)
    num_heads = check.integer("num_heads", num_heads)
    key_dim = check.integer("key_dim", key_dim)
    value_dim = key_dim if value_dim is None else check.integer("value_dim", value_dim)
    x = as_moments(x, "x", mode=mode, ranks=(3,))
    batch, seq_len, width = x.mean.shape
    params, ff_dim = _check_params(params, width, num_heads, key_dim, value_dim)
    mask = check_mask(attention_mask, [batch, seq_len, seq_len], "attention_mask")
    if mode == "full":
        # An unknown batch (a traced None dimension) is checked per example.
        check_full_covariance(batch or 1, seq_len, width, num_heads, key_dim, value_dim,
                              ff_dim, max_bytes)

    if mode == "diagonal":
        mean, var = _diagonal_block(x, params, num_heads, mask, epsilon, relu,
                                    layer_norm_method, residual_covariance)
        return Moments(mean, var, mode)

    # q, k, v share x: independent only when x is a constant (see attention).
    q = dense(x, *params["query"])
    k = dense(x, *params["key"])
    v = dense(x, *params["value"])
    heads = multi_head_attention(q, k, v, num_heads, mask)
    a = dense(heads, *params["output"])
    cross = None
    if residual_covariance:
        cross, between_heads = attention_value_correlations(
            x, q.mean, k.mean, params["value"][0], params["output"][0], num_heads, mask)
        if between_heads is not None:
            a = Moments(a.mean, a.cov + between_heads, a.mode)
    z = layer_norm(add(a, x, cross), *params["norm1"], epsilon=epsilon, method=layer_norm_method)
    pre = dense(z, *params["ffn1"])
    hidden = relu_moments(pre, method=relu)
    y = dense(hidden, *params["ffn2"])
    cross = None
    if residual_covariance:
        if relu == "exact":
            slope = rectified_gaussian(pre.mean, pre.variance())[2]
        else:
            slope = ops.cast(pre.mean > 0, pre.mean.dtype)
        cross = feed_forward_cross_covariance(z, slope, params["ffn1"][0], params["ffn2"][0])
    return layer_norm(add(y, z, cross), *params["norm2"], epsilon=epsilon,
                      method=layer_norm_method)

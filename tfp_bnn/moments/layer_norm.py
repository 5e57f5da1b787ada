"""Layer normalisation over the last axis, with a random gain and bias.

For each token j, LayerNorm computes (as keras.layers.LayerNormalization)

    z_ji = g_i u_ji + b_i,   u_j = (x_j - xbar_j) / sqrt(var_j + epsilon),
    xbar_j = mean_i x_ji,  var_j = mean_i (x_ji - xbar_j)^2   (biased).

Approximation (a first-order scheme, refined in 1.-3.):

1. Centring is linear, xc_j = P x_j with P = I - 11^T / I, so it is
   applied exactly: mean mc = P m, covariance C'_{jk} = P C_{jk} P (not
   a constant computed from the means, which would keep the uncentred
   covariance).
2. The divisor, per token, comes from the moments:

       s_j = sqrt(E[var_j] + epsilon),
       E[var_j] = mean_i mc_ji^2 + tr(P C_jj P) / I,

   and the mean of u is mu_j = mc_j / s_j: the standard deviation, with
   epsilon. A divisor from the means only, mean_i mc_ji^2, falls short:
   when the noise is not small compared with the spread of the means, a
   sampled LayerNorm divides by the spread of the noisy sample, so a
   means-only divisor is too small and inflates both the mean and the
   variance of z. Adding the propagated part tr(P C_jj P) / I is the exact
   expectation of var_j and tracks sampling better
   (`propagate_variance=False` gives the means-only divisor;
   tests/moments/test_layer_norm.py measures both).
3. The covariance of u, by `method`:

   "linearized" (default): first-order Taylor expansion of the whole
   normalisation u(x) = P x / sqrt(|P x|^2 / I + epsilon) around the mean
   input. Its Jacobian is

       J_j = (P - mu_j mu_j^T / I) / s_j        (symmetric, P mu_j = mu_j),

   so Cov[u_j, u_k] = J_j C_jk J_k^T for every token pair (full mode) and
   Var[u_ji] = sum_l (J_j)_il^2 v_jl (diagonal mode, O(I) per token:
   (J_j)_il = (delta_il - (1 + mu_ji mu_jl) / I) / s_j). The term
   mu mu^T / I removes the radial part of the noise: a sampled LayerNorm
   rescales each sample to (nearly) the same norm, so noise along mc_j
   scales the divisor with the numerator and mostly cancels. With the
   propagated divisor, J_j is the Jacobian at the mean input with
   epsilon replaced by epsilon + tr(P C_jj P) / I (the noise's share of
   var_j); with `propagate_variance=False` it is the plain Taylor
   expansion at the mean.

   "constant": the divisor s_j treated as a constant, Cov[u_j, u_k] =
   P C_jk P / (s_j s_k) (the behaviour before "linearized"; the
   plain first-order rule with the corrections above). It keeps the radial noise, which
   the sampled LayerNorm removes, and so overestimates the variance.

   Measured against 2e4 samples (I = 8, 3 tokens, random gain and bias;
   relative Frobenius error of the variances, test_layer_norm.py):
   noise std 0.2 x the spread of the means, full mode 0.099 constant vs
   0.015 linearized, diagonal 0.111 vs 0.066; noise as large as the
   spread, full 0.080 vs 0.057, diagonal 0.108 vs 0.095. In a transformer
   block (test_transformer.py, posterior std 0.1) the first LayerNorm's
   output variance error drops from 0.374 to 0.113 (full) and from 0.352
   to 0.226 (diagonal). Hence the default. What remains is the
   curvature of the normalisation (second order in the noise, e.g. the
   radial component it creates from tangential noise), which the
   first-order rule cannot see.
4. With g, b independent of x, mean-field and shared by the tokens, the
   product rule below is exact given the
   moments of u (mean mu, covariance Cov[u] from 3.):

       E[z_ji] = E[g_i] mu_ji + E[b_i]
       Cov[z_ji, z_kl] = delta_il Var[g_i] (Cov[u_ji, u_ki] + mu_ji mu_ki)
                         + Cov[u_ji, u_kl] E[g_i] E[g_l]
                         + delta_il Var[b_i].

Diagonal mode takes C diagonal and keeps only Var[z_ji]; it is the
diagonal of full mode for a diagonal input covariance.
"""

from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import add_covariances
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov
from tfp_bnn.moments.gaussian import vector_or_none


def _centred_covariance(x, tokens, width):
    """P C P per token pair as [B, J, I, J, I] (full mode)."""
    c = unflatten_cov(x.cov, (tokens, width))
    c = c - ops.mean(c, axis=2, keepdims=True)
    return c - ops.mean(c, axis=4, keepdims=True)


METHODS = ("linearized", "constant")


def _project_radial(cu, u, width):
    """Q_j cu Q_k^T with Q_j = I - u_j u_j^T / I, on [B, J, I, J, I]."""
    left = ops.einsum("bji,bjikl->bjkl", u, cu)
    cu = cu - u[:, :, :, None, None] * left[:, :, None] / width
    right = ops.einsum("bjikl,bkl->bjik", cu, u)
    return cu - right[..., None] * u[:, None, None] / width


def diagonal_layer_norm(m, v, gamma_loc, gamma_var, beta_loc, beta_var, epsilon=1e-3,
                        propagate_variance=True, method="linearized"):
    """Mean and variances of the LayerNorm over the last axis, diagonal mode.

    The diagonal-mode rule of `layer_norm` on plain tensors of any rank
    (its arguments converted and checked): `m` the means, `v` the variances
    or None (a constant), `gamma_loc` [I] (not None). Returns (mean, var),
    var None only if `v`, `gamma_var` and `beta_var` are all None.
    """
    width = m.shape[-1]
    mc = m - ops.mean(m, axis=-1, keepdims=True)
    expected_var = ops.mean(ops.square(mc), axis=-1, keepdims=True)
    if v is not None:
        total = ops.sum(v, axis=-1, keepdims=True)
        cc = v * (1.0 - 2.0 / width) + total / width**2  # diag(P C P)
        if propagate_variance:
            # tr(P C P) / I = sum(cc) / I = total (1 - 1/I) / I.
            expected_var = expected_var + total * ((1.0 - 1.0 / width) / width)
        if method == "linearized":
            # sum_l v_l mu_l^k = sum_l v_l mc_l^k / s^k, reduced before s is known.
            v_mc = ops.sum(v * mc, axis=-1, keepdims=True)
            v_mc2 = ops.sum(v * ops.square(mc), axis=-1, keepdims=True)
    s_squared = expected_var + epsilon
    s = ops.sqrt(s_squared)  # the std, not the variance
    mu = mc / s
    mean = gamma_loc * mu
    if beta_loc is not None:
        mean = mean + beta_loc
    if v is None and gamma_var is None and beta_var is None:
        return mean, None
    vu = None
    if v is not None and method == "constant":
        vu = cc / s_squared
    elif v is not None:
        # diag(A diag(v) A^T), A_il = delta_il - (1 + mu_i mu_l) / I, i.e.
        # A = P - mu mu^T / I (I the width).
        mu_squared = ops.square(mu)
        sums = [total, v_mc / s, v_mc2 / s_squared]
        vu = (v * (1.0 - 2.0 * (1.0 + mu_squared) / width)
              + (sums[0] + 2.0 * mu * sums[1] + mu_squared * sums[2]) / width**2)
        vu = vu / s_squared
    var = None
    if vu is not None:
        var = vu * ops.square(gamma_loc)
    if gamma_var is not None:
        term = gamma_var * (ops.square(mu) if vu is None else vu + ops.square(mu))
        var = term if var is None else var + term
    if beta_var is not None:
        var = (ops.broadcast_to(beta_var, ops.shape(mu)) if var is None else var + beta_var)
    return mean, var


def layer_norm(
    x: Moments,
    gamma_loc,
    gamma_var,
    beta_loc,
    beta_var,
    epsilon=1e-3,
    propagate_variance=True,
    method="linearized",
) -> Moments:
    """Moments of LayerNormalization over the last axis, random gain and bias.

    Args:
        x: Moments with mean [B, J, I] or [B, I] (a constant tensor is
            accepted).
        gamma_loc: [I], mean of the gain g (None means g = 1).
        gamma_var: [I], variance of each gain entry, or None.
        beta_loc: [I], mean of the bias b, or None (no bias).
        beta_var: [I], variance of each bias entry, or None.
        epsilon: added to the variance in the divisor, as in Keras.
        propagate_variance: if True (default) the divisor uses E[var_j]
            including the propagated covariance; False gives the
            means-only divisor (with "linearized": the plain first-order
            Taylor expansion at the mean input).
        method: "linearized" (default: the Jacobian of the normalisation,
            which removes the radial part of the noise) or "constant" (the
            divisor treated as a constant); see the module docstring.

    Returns:
        Moments of z, same shape and mode as `x`.

    Raises:
        ValueError: naming the argument with a wrong shape or `method`.

    Example:
    >>> x = tfp_bnn.moments.Moments(np.array([[1.0, 2.0, 3.0, 4.0]]), np.full([1, 4], 0.01))
    >>> z = tfp_bnn.moments.layer_norm(x, None, None, None, None)   # g = 1, no bias
    >>> np.asarray(z.mean).round(3)   # (x - 2.5) / sqrt(1.25 + 0.0075 + 1e-3), E[var] with noise
    array([[-1.337, -0.446,  0.446,  1.337]], dtype=float32)
    """
    check.one_of("method", method, METHODS)
    x = as_moments(x, "x")
    width = x.mean.shape[-1]
    tokens = x.mean.shape[1] if len(x.mean.shape) == 3 else 1
    gamma_loc = vector_or_none(gamma_loc, "gamma_loc", width)
    gamma_var = vector_or_none(gamma_var, "gamma_var", width)
    beta_loc = vector_or_none(beta_loc, "beta_loc", width)
    beta_var = vector_or_none(beta_var, "beta_var", width)
    if gamma_loc is None:
        gamma_loc = ops.ones((width,), "float32")

    if x.mode == "diagonal":
        mean, var = diagonal_layer_norm(x.mean, x.cov, gamma_loc, gamma_var, beta_loc, beta_var,
                                        epsilon, propagate_variance, method)
        return Moments(mean, var, x.mode)

    m = ops.reshape(x.mean, (-1, tokens, width))
    mc = m - ops.mean(m, axis=-1, keepdims=True)
    expected_var = ops.mean(ops.square(mc), axis=-1)  # [B, J]
    cc = None
    if x.cov is not None:
        cc = _centred_covariance(x, tokens, width)
        # tr(P C_jj P): the diagonal of the [J*I, J*I] matrix, per token.
        diag = ops.reshape(ops.diagonal(ops.reshape(cc, (-1, tokens * width, tokens * width)),
                                        axis1=-2, axis2=-1),
                           (-1, tokens, width))
        trace = ops.sum(diag, axis=-1)
        if propagate_variance:
            expected_var = expected_var + trace / width
    s = ops.sqrt(expected_var + epsilon)  # [B, J]; std, not variance
    mu = mc / s[..., None]
    mean = gamma_loc * mu
    if beta_loc is not None:
        mean = mean + beta_loc
    mean = ops.reshape(mean, ops.shape(x.mean))
    if cc is None and gamma_var is None and beta_var is None:
        return Moments(mean, None, x.mode)

    # The product rule of the module docstring (4.), on [B, J, I, J, I].
    terms = []
    shared = []  # delta_il terms, every token pair: [B, J, J, I]
    cu = None
    if cc is not None:
        cu = cc / (s[:, :, None, None, None] * s[:, None, None, :, None])
        if method == "linearized":
            cu = _project_radial(cu, mu, width)
        terms.append(cu * gamma_loc[:, None, None] * gamma_loc)
    if gamma_var is not None:
        second = ops.einsum("bji,bki->bjki", mu, mu)
        if cu is not None:
            # Cov[u_ji, u_ki] for every token pair: [B, J, J, I].
            second = second + ops.diagonal(ops.transpose(cu, (0, 1, 3, 2, 4)), axis1=-2, axis2=-1)
        shared.append(second * gamma_var)
    if beta_var is not None:
        shared.append(ops.broadcast_to(beta_var, (ops.shape(m)[0], tokens, tokens, width)))
    if shared:
        eye = ops.eye(width, dtype=m.dtype)
        terms.append(ops.einsum("bjki,il->bjikl", add_covariances(*shared), eye))
    return Moments(mean, flatten_cov(add_covariances(*terms), (tokens, width)), x.mode)

"""ReLU on moments: exact rectified-Gaussian moments, or a first-order Taylor rule.

"exact" (the default) treats each unit as Gaussian, x ~ N(m, v), s =
sqrt(v), alpha = m / s, and uses the moments of the rectified Gaussian:

    E[relu(x)]   = m Phi(alpha) + s phi(alpha)
    Var[relu(x)] = v (Phi(alpha) - t (t - alpha)),  t = alpha Phi(alpha) + phi(alpha)

with t - alpha = phi(alpha) - alpha Phi(-alpha) computed directly, so a
huge positive alpha gives Var = v Phi = v instead of the cancellation of
(m^2 + v) Phi - E[relu]^2. Between units a != b (full mode):

    Cov[relu(x_a), relu(x_b)] ~= Phi(alpha_a) Phi(alpha_b) C_ab.

Stein's lemma gives Cov[relu(x_a), x_b] = Phi(alpha_a) C_ab exactly; the
product is its first-order extension (exact to first order in C_ab, by
Price's theorem). It keeps the matrix positive semi-definite: it equals
D C D with D = diag(Phi), plus a diagonal Var[relu(x_a)] - Phi_a^2 v_a
which is >= 0 because, by Cauchy-Schwarz and Stein,
(Phi_a v_a)^2 = Cov[relu(x_a), x_a]^2 <= Var[relu(x_a)] v_a.

"taylor" is the first-order rule (as for the softmax; the ReLU Jacobian
is diag(1[m > 0])):

    E ~= relu(m),   Cov_ab ~= 1[m_a > 0] 1[m_b > 0] C_ab.

It gives zero mean and zero variance to every unit whose mean is
negative, although such a unit is positive with probability Phi(alpha),
so it underestimates both; "exact" is the default for that reason.

A unit with v = 0 (or a constant input, cov None) is passed through as
relu(m) with zero variance under both methods.
"""

import math

from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.moments._numerics import erfc
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import set_diagonal

METHODS = ("exact", "taylor")


# Beyond |m / s| = 20 the float32 formulas below already return their limits
# exactly (Phi(-20) ~ 3e-89 and phi(20) ~ 5e-88 underflow float32), so such a
# unit is relu(m) with Var = v 1[m > 0] and slope 1[m > 0], and takes that
# branch: computing alpha = m / s there costs the gradient d alpha / d s =
# -m / s^2, which overflows to inf (NaN once multiplied by a zero) when s is
# tiny, e.g. v ~ 1e-37 after a posterior scale softplus(rho) with rho ~ -43.
_SATURATED_ALPHA = 20.0


def rectified_gaussian(mean, variance):
    """Mean, variance and Phi(m / s) of relu(x), x ~ N(mean, variance), elementwise.

    Safe at variance 0 (returns relu(mean), 0 and 1[mean > 0]) and for
    |mean / s| up to the float32 range, values and gradients: a unit with
    |mean / s| > 20 gets the limits relu(mean), variance * 1[mean > 0] and
    1[mean > 0], which the formulas reach exactly in float32 there.
    """
    random = variance > 0
    # Decided without forming alpha: m^2 > 400 v <=> |alpha| > 20.
    saturated = ops.square(mean) > (_SATURATED_ALPHA * _SATURATED_ALPHA) * variance
    smooth = ops.logical_and(random, ops.logical_not(saturated))
    # Both branches of every where() below see finite inputs (s = 1 where
    # the unit is not smooth), so neither sends inf or NaN into the gradient.
    s = ops.sqrt(ops.where(smooth, variance, ops.ones_like(variance)))
    alpha = ops.where(smooth, mean, ops.zeros_like(mean)) / s
    # One erfc: the smaller tail Phi(-|alpha|) directly, the larger one as
    # 1 - tail (>= 1/2, no cancellation); upper = Phi(-alpha), not 1 - cdf.
    tail = 0.5 * erfc(ops.abs(alpha) / math.sqrt(2.0))
    positive = alpha >= 0
    cdf = ops.where(positive, 1.0 - tail, tail)
    upper = ops.where(positive, tail, 1.0 - tail)
    pdf = ops.exp(-0.5 * ops.square(alpha)) / math.sqrt(2.0 * math.pi)
    t = alpha * cdf + pdf
    gap = pdf - alpha * upper  # t - alpha
    # Rounding can leave a hair below the Stein bound Phi^2 (and below 0).
    var_ratio = ops.maximum(cdf - t * gap, ops.square(cdf))
    step = ops.cast(mean > 0, mean.dtype)
    out_mean = ops.where(smooth, s * t, ops.relu(mean))
    # variance * step: the |alpha| -> inf limit of variance * var_ratio.
    limit_var = ops.where(random, variance * step, ops.zeros_like(variance))
    out_var = ops.where(smooth, variance * var_ratio, limit_var)
    slope = ops.where(smooth, cdf, step)
    return out_mean, out_var, slope


def relu(x: Moments, method="exact") -> Moments:
    """Moments of relu(x), elementwise.

    Args:
        x: Moments of any supported shape ([B, J, I] or [B, I]).
        method: "exact" (rectified-Gaussian moments, default) or "taylor"
            (the first-order rule).

    Returns:
        Moments of the same shape and mode; cov None if `x` is a constant.

    Raises:
        ValueError: naming `method` if it is not one of `METHODS`.

    Example:
    >>> x = tfp_bnn.moments.Moments(np.zeros([1, 1]), np.ones([1, 1]))   # N(0, 1)
    >>> y = tfp_bnn.moments.relu(x)   # 1 / sqrt(2 pi), 1/2 - 1 / (2 pi)
    >>> float(y.mean[0, 0]), float(y.cov[0, 0])
    (0.398942..., 0.340845...)
    """
    check.one_of("method", method, METHODS)
    x = as_moments(x, "x")
    if x.cov is None:
        return Moments(ops.relu(x.mean), None, x.mode)
    variance = x.variance()
    if method == "taylor":
        mean = ops.relu(x.mean)
        slope = ops.cast(x.mean > 0, x.mean.dtype)
        var = variance * slope
    else:
        mean, var, slope = rectified_gaussian(x.mean, variance)
    if x.mode == "diagonal":
        return Moments(mean, var, x.mode)
    slope = ops.reshape(slope, (-1, x.event_size))
    cov = x.cov * slope[:, :, None] * slope[:, None, :]
    cov = set_diagonal(cov, ops.reshape(var, (-1, x.event_size)))
    return Moments(mean, cov, x.mode)

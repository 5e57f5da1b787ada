"""The two terms of the sampling-free objective: a data term and a closed-form KL.

Data term. With the propagated moments (m, Sigma) of the flattened output
of one example (n = J*I entries), the data term scores a target y by

    log N(y; m, Sigma) = -0.5 (n log 2 pi + log|Sigma| + (y - m)^T Sigma^-1 (y - m)).

This is the log density of the moment-matched Gaussian predictive, not
the expected log-likelihood E_q[log p(y | X, w)] of the ELBO (by Jensen
it is not below it when the predictive is Gaussian, so this "ELBO" is an
approximation, not a bound). Alone, this term has no observation noise: Sigma is the weight-induced
covariance only and is singular whenever the weights cannot move some
output direction (always, for deterministic weights). `noise_variance`
adds the aleatoric part, Sigma + noise_variance I, and `jitter` keeps the
Cholesky factorisation defined.

Complexity term. A mean-field posterior has one variance per weight, for
which the closed form is the general diagonal case

    KL(N(mu, diag(v)) || N(0, sigma_p^2 I))
        = 0.5 sum_k (v_k / sigma_p^2 + mu_k^2 / sigma_p^2 - 1 - log(v_k / sigma_p^2)),

(with one variance per row of a weight matrix and sigma_p = 1 the sum
simplifies further).
"""

import math

import numpy as np
from keras import ops

from tfp_bnn import _validation as check

from tfp_bnn.moments._numerics import cholesky
from tfp_bnn.moments._numerics import wide_float
from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import compatible
from tfp_bnn.moments.gaussian import set_diagonal
from tfp_bnn.moments.gaussian import to_float32


def gaussian_log_likelihood(y, pred: Moments, noise_variance=0.0, jitter=1e-6):
    """Per-example log N(y; pred.mean, pred.cov + noise_variance I).

    Computed in float64 (in float32 on JAX unless `jax_enable_x64` is set,
    where a larger `jitter` may be needed). The jitter is relative: `jitter` times the largest
    variance of the example is added to every variance. A float32
    covariance carries relative rounding of ~6e-8 in its entries, which can
    make a singular Sigma indefinite by about that much times its largest
    entry, and the largest entry of a covariance is a variance; an absolute
    jitter would instead be negligible for outputs in large units and
    dominant for outputs in small ones. With the default 1e-6 a rank-one
    covariance of 1024 entries factorises, and the log-likelihood of a
    well-conditioned Sigma moves by about 1e-6 per entry.

    Args:
        y: targets, same shape as `pred.mean` ([B, J, I] or [B, I]).
        pred: the predicted Moments (full or diagonal).
        noise_variance: observation-noise variance, a scalar or a tensor
            broadcastable to `y`.
        jitter: relative diagonal jitter (>= 0).

    Returns:
        float32 tensor [B] of log-likelihoods (sum over the J*I entries).

    Raises:
        ValueError: naming `y` for a shape mismatch, `jitter` if negative,
            or `noise_variance` if the prediction is a constant and there is
            no noise (the density does not exist).

    Example:
    >>> pred = tfp_bnn.moments.Moments(np.zeros([1, 2]), np.ones([1, 2]))
    >>> np.asarray(tfp_bnn.moments.gaussian_log_likelihood(np.zeros([1, 2]), pred)).round(4)
    array([-1.8379], dtype=float32)
    """
    pred = as_moments(pred, "pred")
    y = to_float32(y)
    if not compatible(y.shape, pred.mean.shape):
        raise ValueError(f"`y` of shape {tuple(y.shape)} does not match the prediction "
                         f"{tuple(pred.mean.shape)}.")
    jitter = check.number("jitter", jitter, low=0.0)
    if pred.cov is None and isinstance(noise_variance, (int, float)) and noise_variance <= 0:
        raise ValueError(
            "`noise_variance` must be > 0 for a deterministic prediction (cov None): "
            "a point mass has no density."
        )
    n = pred.event_size
    f64 = wide_float()
    residual = ops.reshape(ops.cast(y - pred.mean, f64), (-1, n))
    noise = ops.broadcast_to(to_float32(noise_variance), ops.shape(pred.mean))
    noise = ops.reshape(ops.cast(noise, f64), (-1, n))

    if pred.mode == "diagonal":
        var = ops.reshape(ops.cast(pred.variance(), f64), (-1, n)) + noise
        return ops.cast(_diagonal_log_density(residual, var, jitter), "float32")
    cov = ops.cast(pred.full_covariance(), f64)
    diag = ops.diagonal(cov, axis1=-2, axis2=-1) + noise
    diag = diag + jitter * ops.max(diag, axis=-1, keepdims=True)
    chol = cholesky(set_diagonal(cov, diag))
    white = ops.solve_triangular(chol, residual[..., None], lower=True)
    quad = ops.sum(ops.square(white[..., 0]), axis=-1)
    logdet = 2.0 * ops.sum(ops.log(ops.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
    const = n * math.log(2.0 * math.pi)
    return ops.cast(-0.5 * (const + logdet + quad), "float32")


def _diagonal_log_density(residual, var, jitter):
    """log N(residual; 0, diag(var)) per row of float64 [B, n] tensors, relative jitter."""
    var = var + jitter * ops.max(var, axis=-1, keepdims=True)
    quad = ops.sum(ops.square(residual) / var, axis=-1)
    logdet = ops.sum(ops.log(var), axis=-1)
    const = residual.shape[-1] * math.log(2.0 * math.pi)
    return -0.5 * (const + logdet + quad)


def diagonal_log_likelihood(y, mean, log_variance, jitter=1e-6):
    """Per-example log N(y; mean, diag(exp(log_variance))), from log variances.

    The diagonal case of `gaussian_log_likelihood` (same value, same
    relative `jitter`) for a prediction given as s = log sigma^2, as
    `tfp_bnn.losses.MomentGaussianNLL(mode="diagonal")` receives it. exp(s)
    is taken in float64 (float32 on JAX unless `jax_enable_x64` is set)
    and the gradient reaches s without passing through
    a float32 variance: d/dv = 0.5 (r^2 / v^2 - 1 / v) overflows float32 as
    soon as v is small (1.3e43 at v = exp(-50), r = 1, so inf, and inf * v
    for d/ds), while d/ds = 0.5 (1 - r^2 / v) is 2.6e21 there.

    Args:
        y: targets, a tensor [B, ...] (any float dtype; computed in float64).
        mean: predicted means, of the shape of `y`.
        log_variance: predicted log variances, of the shape of `y`.
        jitter: relative diagonal jitter (>= 0).

    Returns:
        float32 tensor [B] of log-likelihoods (sum over the entries of an
        example).

    Raises:
        ValueError: naming `y` or `log_variance` if its shape differs from
            `mean`'s, or `jitter` if negative.

    Example:
    >>> zeros = np.zeros([1, 2], "float32")
    >>> log_density = tfp_bnn.moments.diagonal_log_likelihood(zeros, zeros, zeros)
    >>> np.asarray(log_density).round(4)   # -log(2 pi)
    array([-1.8379], dtype=float32)
    """
    jitter = check.number("jitter", jitter, low=0.0)
    f64 = wide_float()
    mean = ops.cast(mean, f64)
    for name, value in (("y", y), ("log_variance", log_variance)):
        shape = getattr(value, "shape", None)
        if shape is not None and not compatible(shape, mean.shape):
            raise ValueError(f"`{name}` of shape {tuple(shape)} does not match `mean` of shape "
                             f"{tuple(mean.shape)}.")
    n = int(np.prod(mean.shape[1:]))
    residual = ops.reshape(ops.cast(y, f64) - mean, (-1, n))
    var = ops.exp(ops.reshape(ops.cast(log_variance, f64), (-1, n)))
    return ops.cast(_diagonal_log_density(residual, var, jitter), "float32")


def gaussian_kl_to_normal(loc, var, prior_scale=1.0):
    """KL(N(loc, diag(var)) || N(0, prior_scale^2 I)), summed.

    Args:
        loc: tensor of posterior means, any shape.
        var: tensor of per-weight posterior variances (> 0), same shape.
        prior_scale: the prior standard deviation sigma_p > 0.

    Returns:
        float32 scalar, the KL in nats.

    Raises:
        ValueError: naming `var` for a shape mismatch or `prior_scale` if
            it is not positive.

    Example:
    >>> float(tfp_bnn.moments.gaussian_kl_to_normal(np.ones([3]), np.ones([3])))   # 3 * 1 / 2
    1.5
    """
    loc = to_float32(loc)
    var = to_float32(var)
    if not compatible(var.shape, loc.shape):
        raise ValueError(f"`var` of shape {tuple(var.shape)} does not match `loc` of shape "
                         f"{tuple(loc.shape)}.")
    if isinstance(prior_scale, (int, float)):  # a tensor is taken as it is
        check.positive("prior_scale", prior_scale)
    prior_var = ops.square(to_float32(prior_scale))
    ratio = var / prior_var
    return 0.5 * ops.sum(ratio + ops.square(loc) / prior_var - 1.0 - ops.log(ratio))

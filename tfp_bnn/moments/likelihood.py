"""The two terms of the sampling-free objective, seed 000, eq. (12) and (13).

Data term. With the propagated moments (m, Sigma) of the flattened output
of one example (n = J*I entries), eq. (13) scores a target y by

    log N(y; m, Sigma) = -0.5 (n log 2 pi + log|Sigma| + (y - m)^T Sigma^-1 (y - m)).

This is the log density of the moment-matched Gaussian predictive, not
the expected log-likelihood E_q[log p(y | X, w)] that §3-4 of the seed
set out to compute (by Jensen it is not below it when the predictive is
Gaussian, so the "ELBO" of eq. (13) is an approximation, not a bound).
Eq. (13) also has no observation noise: Sigma is the weight-induced
covariance only and is singular whenever the weights cannot move some
output direction (always, for deterministic weights). `noise_variance`
adds the aleatoric part, Sigma + noise_variance I, and `jitter` keeps the
Cholesky factorisation defined.

Complexity term. Eq. (12) assumes one variance per row of each weight
matrix; a mean-field posterior has one variance per weight, for which the
closed form is the general diagonal case

    KL(N(mu, diag(v)) || N(0, sigma_p^2 I))
        = 0.5 sum_k (v_k / sigma_p^2 + mu_k^2 / sigma_p^2 - 1 - log(v_k / sigma_p^2)),

which reduces to eq. (12) when the variances of a row are equal and
sigma_p = 1.
"""

import math

import tensorflow as tf

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import as_moments


def gaussian_log_likelihood(y, pred: Moments, noise_variance=0.0, jitter=1e-6):
    """Per-example log N(y; pred.mean, pred.cov + noise_variance I), eq. (13).

    Computed in float64. The jitter is relative: `jitter` times the largest
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
    """
    pred = as_moments(pred, "pred")
    y = tf.convert_to_tensor(y, tf.float32)
    if not y.shape.is_compatible_with(pred.mean.shape):
        raise ValueError(f"`y` of shape {y.shape} does not match the prediction {pred.mean.shape}.")
    if not isinstance(jitter, (int, float)) or jitter < 0:
        raise ValueError(f"`jitter` must be a number >= 0, got {jitter!r}.")
    if pred.cov is None and isinstance(noise_variance, (int, float)) and noise_variance <= 0:
        raise ValueError(
            "`noise_variance` must be > 0 for a deterministic prediction (cov None): "
            "a point mass has no density."
        )
    n = pred.event_size
    f64 = tf.float64
    residual = tf.reshape(tf.cast(y - pred.mean, f64), [-1, n])
    noise = tf.broadcast_to(tf.convert_to_tensor(noise_variance, tf.float32), tf.shape(pred.mean))
    noise = tf.reshape(tf.cast(noise, f64), [-1, n])
    const = n * math.log(2.0 * math.pi)

    if pred.mode == "diagonal":
        var = tf.reshape(tf.cast(pred.variance(), f64), [-1, n]) + noise
        var = var + jitter * tf.reduce_max(var, axis=-1, keepdims=True)
        quad = tf.reduce_sum(tf.square(residual) / var, axis=-1)
        logdet = tf.reduce_sum(tf.math.log(var), axis=-1)
    else:
        cov = tf.cast(pred.full_covariance(), f64)
        diag = tf.linalg.diag_part(cov) + noise
        diag = diag + jitter * tf.reduce_max(diag, axis=-1, keepdims=True)
        chol = tf.linalg.cholesky(tf.linalg.set_diag(cov, diag))
        white = tf.linalg.triangular_solve(chol, residual[..., None], lower=True)
        quad = tf.reduce_sum(tf.square(white[..., 0]), axis=-1)
        logdet = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)), axis=-1)
    return tf.cast(-0.5 * (const + logdet + quad), tf.float32)


def gaussian_kl_to_normal(loc, var, prior_scale=1.0):
    """KL(N(loc, diag(var)) || N(0, prior_scale^2 I)), summed (eq. (12)).

    Args:
        loc: tensor of posterior means, any shape.
        var: tensor of per-weight posterior variances (> 0), same shape.
        prior_scale: the prior standard deviation sigma_p > 0.

    Returns:
        float32 scalar, the KL in nats.

    Raises:
        ValueError: naming `var` for a shape mismatch or `prior_scale` if
            it is not positive.
    """
    loc = tf.convert_to_tensor(loc, tf.float32)
    var = tf.convert_to_tensor(var, tf.float32)
    if not var.shape.is_compatible_with(loc.shape):
        raise ValueError(f"`var` of shape {var.shape} does not match `loc` of shape {loc.shape}.")
    if isinstance(prior_scale, (int, float)) and prior_scale <= 0:
        raise ValueError(f"`prior_scale` must be > 0, got {prior_scale!r}.")
    prior_var = tf.square(tf.convert_to_tensor(prior_scale, tf.float32))
    ratio = var / prior_var
    return 0.5 * tf.reduce_sum(ratio + tf.square(loc) / prior_var - 1.0 - tf.math.log(ratio))

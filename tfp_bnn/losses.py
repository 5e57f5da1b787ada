"""Likelihood terms for regression networks, and their Monte Carlo evaluation.

`GaussianNLL` is the data term of the per-example objective

    loss = mean NLL + kl_weight * KL(q || p),  kl_weight = 1/N

for a network that predicts its own noise level (heteroscedastic
regression). `gaussian_log_likelihood_mc` and `predictive_rmse` score the
Monte Carlo predictive distribution of such a network on held-out data, as
the UCI benchmarks report it.
"""

import math

import keras
import numpy as np
from keras import ops

from tfp_bnn import _validation as check

# The loss of distribution-valued outputs lives beside them; listed here too.
from tfp_bnn.distributions.negative_log_likelihood import NegativeLogLikelihood  # noqa: F401
from tfp_bnn.distributions.negative_log_likelihood import negative_log_likelihood  # noqa: F401

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _at_least_float32(x):
    """`x` as a float tensor of at least float32 precision (float64 is kept).

    Log-densities are computed in float32 whatever the network computes in:
    in float16, exp(-s/2) overflows from s < -22 and a squared residual from
    |y - mean| > 256 (65504 is float16's largest number), and the NLL itself
    loses all but three digits.
    """
    x = ops.convert_to_tensor(x)
    if keras.backend.standardize_dtype(x.dtype) not in ("float32", "float64"):
        x = ops.cast(x, "float32")
    return x


def _rank(x):
    """The static rank of `x`, None where TensorFlow does not know it."""
    shape = x.shape
    return shape.rank if hasattr(shape, "rank") else len(shape)


def _compatible(shape, other):
    """True when two static shapes have one rank and agree wherever both are known."""
    shape, other = tuple(shape), tuple(other)
    return len(shape) == len(other) and all(
        a is None or b is None or a == b for a, b in zip(shape, other))


def _split_mean_log_var(y_pred):
    """Splits the last axis [mean, log variance] and checks its size."""
    y_pred = _at_least_float32(y_pred)
    rank = _rank(y_pred)
    last = y_pred.shape[-1] if rank else None
    if rank == 0 or (last is not None and last != 2):
        raise ValueError(
            "GaussianNLL expects `y_pred` whose last axis has 2 columns "
            f"[mean, log variance], got shape {tuple(y_pred.shape)}."
        )
    return y_pred[..., 0], y_pred[..., 1]


def gaussian_nll(y_true, y_pred):
    """Per-example NLL of y_true under N(mean, exp(s)), y_pred = [mean, s].

    Kendall and Gal (2017), eq. 5, with s = log sigma^2 predicted by the
    network and the constant kept so that the value is a true NLL:

        0.5 * log(2 pi) + 0.5 * s + 0.5 * (y - mean)^2 * exp(-s)

    The residual is scaled by exp(-s/2) before squaring: exp(-s) alone
    overflows float32 at s < -88, the scaled residual only when the loss
    itself is beyond float32. Half-precision predictions (mixed precision)
    are widened to float32 first.

    Args:
        y_true: targets of shape `batch_shape` or `batch_shape + (1,)`.
        y_pred: predictions of shape `batch_shape + (2,)`.

    Returns:
        Tensor of shape `batch_shape`, float32 (float64 for float64
        predictions).

    Example:
    >>> y_pred = np.array([[0.0, 0.0], [1.0, np.log(4.0)]], "float32")   # [mean, s]
    >>> gaussian_nll(np.array([0.0, 3.0]), y_pred).numpy().round(4)   # 0.919 + s / 2 + r^2 / 2
    array([0.9189, 2.1121], dtype=float32)
    """
    mean, log_var = _split_mean_log_var(y_pred)
    y_true = ops.cast(y_true, mean.dtype)
    rank = _rank(y_true)
    if rank is not None and rank == _rank(mean) + 1:
        # Keras hands targets over as (batch, 1) for a (batch, 2) output.
        y_true = ops.squeeze(y_true, axis=-1)
    scaled_residual = (y_true - mean) * ops.exp(-0.5 * log_var)
    return _HALF_LOG_2PI + 0.5 * log_var + 0.5 * ops.square(scaled_residual)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class GaussianNLL(keras.losses.Loss):
    """Heteroscedastic Gaussian negative log-likelihood.

    For a network whose last output axis is [mean, s] with s = log sigma^2
    (Kendall and Gal 2017, eq. 5):

        NLL = 0.5 * log(2 pi) + 0.5 * s + 0.5 * (y - mean)^2 * exp(-s)

    Predicting log sigma^2 rather than sigma keeps the variance positive
    without a constraint. With the default reduction the loss is the mean
    NLL over the batch, the data term of tfp_bnn's per-example objective.

    Args:
        reduction: as in `keras.losses.Loss`.
        name: name of the loss.
        dtype: as in `keras.losses.Loss`.

    Call arguments:
        y_true: targets of shape `(batch,)` or `(batch, 1)`.
        y_pred: network outputs of shape `(batch, 2)`.

    Returns:
        The reduced NLL (a scalar with the default reduction).

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu")])
    >>> model.add(tfp_bnn.layers.DenseReparameterization(2, kl_weight=1 / 32))
    >>> model.compile(optimizer="adam", loss=GaussianNLL())
    >>> float(GaussianNLL()(np.zeros(2), np.zeros((2, 2))))   # 0.5 log(2 pi)
    0.9189385175704956
    """

    def __init__(self, reduction="sum_over_batch_size", name="gaussian_nll", dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)

    def call(self, y_true, y_pred):
        return gaussian_nll(y_true, y_pred)


def _samples_and_targets(y, means, what):
    """Checks means of shape [T, n] and returns (y as [n], means)."""
    # Scores in at least float32: float16 squares overflow past 256.
    means = _at_least_float32(means)
    if _rank(means) != 2:
        raise ValueError(
            f"`{what}` must have shape [T, n] (T Monte Carlo samples of n "
            f"predictions), got shape {tuple(means.shape)}."
        )
    y = ops.reshape(ops.cast(y, means.dtype), (-1,))
    if y.shape[0] is not None and means.shape[1] is not None and y.shape[0] != means.shape[1]:
        raise ValueError(
            f"`y` has {y.shape[0]} targets but `{what}` has {means.shape[1]} "
            "predictions per sample."
        )
    return y, means


def _check_scale(y_scale):
    # Accepts a Standardizer's std for a 1-D target: a 0-d or one-element array.
    y_scale = np.asarray(y_scale, dtype=np.float64)
    if y_scale.size != 1:
        raise ValueError(f"`y_scale` must be a single number, got shape {y_scale.shape}.")
    return check.positive("y_scale", float(y_scale.reshape(())))


def gaussian_log_likelihood_mc(y, means, log_vars, y_scale=1.0):
    """Per-point log-likelihood of the Monte Carlo predictive mixture.

    With T posterior samples, each giving N(mean_t, exp(s_t)) for a point,
    the predictive density is the equal mixture of the T Gaussians:

        log p(y) = logsumexp_t log N(y | mean_t, exp(s_t)) - log T

    (Gal and Ghahramani 2016, eq. 8; Hernandez-Lobato and Adams 2015). The
    log-mean-exp runs through `keras.ops.logsumexp`, so samples whose
    densities underflow float32 one by one still give a finite mixture.

    If the network was trained on targets standardised as (y - mu) / y_scale,
    pass that y_scale: the density of the original target is the density of
    the standardised one divided by y_scale, i.e. log-likelihood minus
    log(y_scale). `y`, `means` and `log_vars` stay on the standardised scale.

    Args:
        y: targets, shape [n] (or [n, 1]).
        means: predicted means, shape [T, n].
        log_vars: predicted log variances, shape [T, n].
        y_scale: std the targets were divided by, > 0.

    Returns:
        Tensor of shape [n]: log p(y_i) per point (average it for the score).

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> x_test, y_test = np.random.rand(5, 3), np.random.rand(5)
    >>> outputs = np.stack([model(x_test, training=False) for _ in range(20)])
    >>> ll = gaussian_log_likelihood_mc(y_test, outputs[..., 0], outputs[..., 1])
    >>> ll.shape   # one log p(y_i) per point; the score is its mean
    TensorShape([5])
    >>> gaussian_log_likelihood_mc([0.0], [[0.0], [0.0]], [[0.0], [0.0]]).numpy().round(4)
    array([-0.9189], dtype=float32)
    """
    y, means = _samples_and_targets(y, means, "means")
    log_vars = ops.cast(log_vars, means.dtype)
    if _rank(log_vars) != 2 or not _compatible(log_vars.shape, means.shape):
        raise ValueError(
            f"`log_vars` must have the shape of `means` {tuple(means.shape)}, got "
            f"{tuple(log_vars.shape)}."
        )
    y_scale = _check_scale(y_scale)
    log_density = -gaussian_nll(y[None, :], ops.stack([means, log_vars], axis=-1))
    num_samples = ops.cast(ops.shape(means)[0], means.dtype)
    log_mean = ops.logsumexp(log_density, axis=0) - ops.log(num_samples)
    return log_mean - ops.convert_to_tensor(math.log(y_scale), dtype=means.dtype)


def predictive_rmse(y, means, y_scale=1.0):
    """Root mean squared error of the Monte Carlo predictive mean.

    The predictive mean is the average over the T samples; its error is the
    quantity the UCI tables report as RMSE. With standardised targets the
    error in original units is the standardised one times y_scale.

    Args:
        y: targets, shape [n] (or [n, 1]).
        means: predicted means, shape [T, n].
        y_scale: std the targets were divided by, > 0.

    Returns:
        Scalar tensor.

    Example:
    >>> means = np.array([[1.0, 2.0], [3.0, 2.0]])   # T = 2 samples of n = 2 means
    >>> float(predictive_rmse(np.array([2.0, 0.0]), means, y_scale=10.0))   # errors 0, 2
    14.142135623730951
    """
    y, means = _samples_and_targets(y, means, "means")
    y_scale = _check_scale(y_scale)
    error = ops.mean(means, axis=0) - y
    mse = ops.mean(ops.square(error))
    # sqrt has an infinite derivative at 0, which times the zero gradient of
    # the MSE gives NaN for a perfect fit; 0 is a valid subgradient there.
    positive = mse > 0
    rmse = ops.where(positive, ops.sqrt(ops.where(positive, mse, ops.ones_like(mse))),
                     ops.zeros_like(mse))
    return rmse * ops.convert_to_tensor(y_scale, dtype=means.dtype)


def _output_size(width, mode):
    """D from the last axis of a moment prediction: 2D (diagonal) or D + D^2 (full)."""
    if mode == "diagonal":
        return width // 2 if width % 2 == 0 and width > 0 else None
    size = int(round((math.sqrt(1 + 4 * width) - 1) / 2))
    return size if size > 0 and size + size * size == width else None


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MomentGaussianNLL(keras.losses.Loss):
    """Joint Gaussian NLL of D outputs under a propagated covariance.

    The data term of training by moment propagation: the network returns the
    mean of its D outputs and their covariance (propagated through the
    weights' posterior, plus the observation noise), and the loss is

        0.5 * (D log 2 pi + log|Sigma| + (y - m)^T Sigma^-1 (y - m))

    per example, by Cholesky with a relative diagonal `jitter` in full mode
    (`tfp_bnn.moments.gaussian_log_likelihood`, float64 inside). Diagonal
    mode works from the log variances (`tfp_bnn.moments.
    diagonal_log_likelihood`, exp in float64): through a float32 variance
    the gradient overflows from log variances of about -44 (unit residual),
    from s directly only where the loss itself passes float32. On JAX the
    float64 parts run in float32 unless `jax_enable_x64` is set (full mode
    may then need a larger `jitter`).

    Args:
        mode: "diagonal": `y_pred` = [means (D), log variances (D)];
            "full": `y_pred` = [means (D), covariance (D * D, row-major)].
        jitter: relative jitter added to the covariance diagonal, >= 0.
        reduction: as in `keras.losses.Loss` (default: the mean over the
            batch).
        name: name of the loss.
        dtype: the dtype of the loss computation, as in `keras.losses.Loss`.

    Raises:
        ValueError: naming `mode` or `jitter` if invalid; in call, if the
            last axis of `y_pred` fits no D for `mode`.

    Call arguments:
        y_true: targets [batch, D] (or [batch] when D = 1).
        y_pred: [batch, 2D] (diagonal) or [batch, D + D^2] (full).

    Example:
    >>> loss = MomentGaussianNLL(mode="full")
    >>> y_pred = np.array([[0.0, 1.0]], "float32")   # D = 1: mean 0, covariance [[1]]
    >>> round(float(loss(np.zeros((1, 1)), y_pred)), 4)   # 0.5 log(2 pi)
    0.9189
    """

    def __init__(self, mode="full", jitter=1e-6, reduction="sum_over_batch_size",
                 name="moment_gaussian_nll", dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)
        self.mode = check.one_of("mode", mode, ("diagonal", "full"))
        self.jitter = check.number("jitter", jitter, low=0.0)

    def call(self, y_true, y_pred):
        # Imported here: tfp_bnn.moments is a heavier module than the losses.
        from tfp_bnn.moments import Moments  # noqa: PLC0415
        from tfp_bnn.moments import diagonal_log_likelihood  # noqa: PLC0415
        from tfp_bnn.moments import gaussian_log_likelihood  # noqa: PLC0415

        y_pred = _at_least_float32(y_pred)
        width = y_pred.shape[-1]
        size = None if width is None else _output_size(width, self.mode)
        if size is None:
            layout = "2 * D [means, log variances]" if self.mode == "diagonal" else (
                "D + D^2 [means, covariance]")
            raise ValueError(f"MomentGaussianNLL(mode={self.mode!r}) needs a last axis of "
                             f"{layout}, got shape {tuple(y_pred.shape)}.")
        mean = y_pred[..., :size]
        y_true = ops.reshape(ops.cast(y_true, mean.dtype), (-1, size))
        if self.mode == "diagonal":
            # From s directly, exp(s) in float64: through a float32 variance
            # the gradient overflows once exp(s) is small (s = -50).
            return -diagonal_log_likelihood(y_true, mean, y_pred[..., size:],
                                            jitter=self.jitter)
        pred = Moments(mean, ops.reshape(y_pred[..., size:], (-1, size, size)), "full")
        return -gaussian_log_likelihood(y_true, pred, jitter=self.jitter)

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "jitter": self.jitter})
        return config

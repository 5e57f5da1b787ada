"""`RegressionPrediction`: the predictive mixture of T Gaussians per point and output.

Built by `tfp_bnn.predict.regression` (and extended by `DistributionPrediction`); kept apart
from the Monte Carlo loop so that both predictive modules import it without a cycle.
"""

import math
from statistics import NormalDist

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.predict import _chunk_math


def _log_normal(y, mean, variance):
    """log N(y | mean, variance), with variance > 0."""
    return -0.5 * (math.log(2 * math.pi) + np.log(variance) + np.square(y - mean) / variance)


# Samples per pass of the per-sample math (log densities, CDFs, squared deviations):
# each [chunk, N, ...] temporary stays near 2**20 float64 values (8 MiB), so scoring
# T = 10**6 samples needs little beyond the samples themselves.
CHUNK_VALUES = 2**20


def _sample_slices(num_samples, values_per_sample):
    """Slices of the sample axis, each about CHUNK_VALUES values of a [T, N, ...] array."""
    step = max(1, CHUNK_VALUES // max(1, values_per_sample))
    for start in range(0, num_samples, step):
        yield slice(start, start + step)


class RegressionPrediction:
    """The predictive mixture of T Gaussians per point and output.

    Build it with `tfp_bnn.predict.regression(model, x, ...)`, or from
    samples with `RegressionPrediction(sample_means, sample_variances)`.

    Args:
        sample_means: array [T, N, D] (or [T, N]) of the sampled means mu_t.
        sample_variances: array broadcastable to sample_means of the
            sampled noise variances sigma_t^2 >= 0, or None for a model
            without aleatoric noise.

    Attributes:
        mean, epistemic_variance, aleatoric_variance, total_variance, stddev:
            arrays [N, D] (or [N]).

    Example:
    >>> pred = RegressionPrediction(np.array([[1.0], [3.0]]), np.array([[1.0], [1.0]]))
    >>> pred.mean, pred.epistemic_variance, pred.total_variance   # T = 2, N = 1
    (array([2.]), array([1.]), array([2.]))
    >>> pred.rescale(shift=10.0, scale=2.0).mean
    array([14.])
    """

    def __init__(self, sample_means, sample_variances=None):
        means = np.asarray(sample_means, dtype=np.float64)
        if means.ndim < 2 or means.shape[0] < 1 or means.shape[1] < 1:
            raise ValueError(
                "`sample_means` must have shape [T, N, ...] with T >= 1 samples and "
                f"N >= 1 points, got shape {means.shape}."
            )
        if sample_variances is None:
            variances = np.zeros_like(means)
        else:
            variances = np.asarray(sample_variances, dtype=np.float64)
            if variances.shape != means.shape:  # else no copy: T x N arrays can be large
                try:
                    variances = np.array(np.broadcast_to(variances, means.shape))
                except ValueError:
                    raise ValueError(
                        f"`sample_variances` of shape {variances.shape} does not match "
                        f"`sample_means` of shape {means.shape}."
                    ) from None
        if not np.all(np.isfinite(means)):
            raise ValueError("`sample_means` contains NaN or infinite values.")
        if not np.all(np.isfinite(variances)) or np.any(variances < 0):
            raise ValueError("`sample_variances` must be finite and >= 0.")
        self.sample_means = means
        self.sample_variances = variances
        self.mean = means.mean(axis=0)
        # Two-pass variance: no cancellation when the spread is small against the mean.
        squares = np.zeros_like(self.mean)
        for part in self._slices():
            squares += np.square(means[part] - self.mean).sum(axis=0)
        self.epistemic_variance = squares / means.shape[0]
        self.aleatoric_variance = self.sample_variances.mean(axis=0)
        self.total_variance = self.epistemic_variance + self.aleatoric_variance
        self.stddev = np.sqrt(self.total_variance)

    @property
    def num_samples(self):
        return self.sample_means.shape[0]

    def _slices(self):
        return _sample_slices(self.num_samples, math.prod(self.sample_means.shape[1:]))

    def summaries(self):
        """The `REGRESSION_SUMMARIES` dict ("mean", "stddev", ...) `export_predictive` serves.

        Returns:
            dict of arrays: "mean", "stddev", "epistemic_variance",
            "aleatoric_variance", each [N, D] (or [N]).
        """
        return _chunk_math.regression_summaries(self.mean, self.epistemic_variance,
                                                self.aleatoric_variance)

    def rescale(self, shift=0.0, scale=1.0):
        """The same prediction for targets y' = shift + scale * y.

        Maps predictions on standardised targets back to the data's units
        (e.g. `shift=scaler.mean, scale=scaler.std`); log-likelihoods then
        come out in those units.

        Args:
            shift: added to the means (the targets' mean).
            scale: multiplies the means, and its square the variances (the
                targets' std).

        Returns:
            A new prediction of the same class.
        """
        scale = np.asarray(scale, dtype=np.float64)
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ValueError(f"`scale` must be finite and > 0, got {scale!r}.")
        means = scale * self.sample_means
        means += shift  # in place: one new [T, N, ...] array per rescaled sample set
        return RegressionPrediction(means, np.square(scale) * self.sample_variances)

    def _targets(self, y):
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"`y` must be an array of numbers, got {type(y).__name__} that "
                             "does not convert to float (strings, None or ragged rows?).") from None
        shape = self.mean.shape
        if y.shape != shape:
            if y.size == math.prod(shape) and y.ndim <= len(shape) + 1 and (
                y.squeeze().shape == tuple(d for d in shape if d != 1)
            ):
                y = y.reshape(shape)
            else:
                raise ValueError(
                    f"`y` has shape {y.shape} but the predictions have shape {shape} "
                    "(one target per point and output)."
                )
        if not np.all(np.isfinite(y)):
            raise ValueError("`y` contains NaN or infinite values.")
        return y

    def log_likelihood(self, y):
        """Predictive log density of each target, eq. 49; shape [N].

        Outputs of a point are treated as independent given the weights, so
        their log densities add up per sample before the log-mean-exp.

        Args:
            y: targets [N, D] (or [N] for D = 1).

        Returns:
            A float64 array [N].
        """
        y = self._targets(y)
        if np.any(self.sample_variances == 0):
            raise ValueError(
                "The predictive has zero noise variance, so targets have no density; "
                "predict with a noise variance (`noise_variance=` for a mean-only model)."
            )
        peak = total = None
        for part in self._slices():  # a running log-sum-exp over chunks of samples
            log_densities = _log_normal(y, self.sample_means[part], self.sample_variances[part])
            if log_densities.ndim > 2:
                log_densities = log_densities.reshape(log_densities.shape[:2] + (-1,)).sum(-1)
            chunk_peak = log_densities.max(axis=0)
            new_peak = chunk_peak if peak is None else np.maximum(peak, chunk_peak)
            chunk_total = np.exp(log_densities - new_peak).sum(axis=0)
            total = chunk_total if total is None else total * np.exp(peak - new_peak) \
                + chunk_total
            peak = new_peak
        return peak + np.log(total / self.num_samples)

    def rmse(self, y):
        """Root mean squared error of the predictive mean (over points and outputs).

        Args:
            y: targets [N, D] (or [N] for D = 1).

        Returns:
            A float.
        """
        y = self._targets(y)
        return float(np.sqrt(np.mean(np.square(self.mean - y))))

    def interval(self, level=0.95):
        """Central prediction interval (lower, upper) of the predictive mixture.

        Exact quantiles (1 - level)/2 and (1 + level)/2 of the mixture of T
        Gaussians, found by bisection on its CDF (60 halvings: below float64
        resolution); without aleatoric noise, empirical quantiles of the
        sampled means.

        Args:
            level: the central probability, in (0, 1).

        Returns:
            (lower, upper), arrays shaped like `mean`.
        """
        level = check.number("level", level, 0, 1, low_open=True, high_open=True)
        low_q, high_q = (1 - level) / 2, (1 + level) / 2
        if not np.any(self.sample_variances > 0):
            return (np.quantile(self.sample_means, low_q, axis=0),
                    np.quantile(self.sample_means, high_q, axis=0))
        reach = 40 * np.sqrt(self.sample_variances.max(axis=0)) + 1e-300
        low0 = self.sample_means.min(axis=0) - reach
        high0 = self.sample_means.max(axis=0) + reach
        return self._quantile(low_q, low0, high0), self._quantile(high_q, low0, high0)

    def cdf(self, y):
        """The predictive CDF at targets `y`: (1/T) sum_t Phi((y - mu_t) / sigma_t), per
        output; the probability integral transform, uniform on [0, 1] for a calibrated
        predictive (`tfp_bnn.metrics.probability_integral_transform`).

        Args:
            y: targets [N, D] (or [N] for D = 1).

        Returns:
            A float64 array in [0, 1], shaped like `mean`.
        """
        y = self._targets(y)
        if not self._gaussian():
            raise ValueError(
                "The predictive's output distributions are not Normal; its CDF is not the "
                "Gaussian mixture's (predict a Normal head, or evaluate the family's CDF).")
        return self._mixture_cdf(y)

    def _gaussian(self):
        """Whether the predictive is the Gaussian mixture of the sampled means and variances."""
        return True

    def _mixture_cdf(self, y):
        """(1/T) sum_t Phi((y - mu_t) / sigma_t) at `y` (shaped like `mean`), over chunks of T.

        A zero-variance sample is a step at its mean.
        """
        total = np.zeros(self.mean.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            for part in self._slices():
                means = self.sample_means[part]
                sd = np.sqrt(self.sample_variances[part])
                z = (y - means) / sd
                total += np.where(sd > 0, _chunk_math.normal_cdf(np.where(sd > 0, z, 0.0)),
                                  (y >= means).astype(np.float64)).sum(axis=0)
        return total / self.num_samples

    def _quantile(self, q, low, high):
        for _ in range(60):
            mid = 0.5 * (low + high)
            below = self._mixture_cdf(mid) < q
            low = np.where(below, mid, low)
            high = np.where(below, high, mid)
        return 0.5 * (low + high)

    def coverage(self, y, level=0.95):
        """Fraction of targets inside the central `level` prediction interval.

        Args:
            y: targets [N, D] (or [N] for D = 1).
            level: the central probability, in (0, 1).

        Returns:
            A float in [0, 1]; about `level` for a calibrated model.
        """
        y = self._targets(y)
        if self._gaussian() and np.all(self.sample_variances > 0):
            # The CDF is continuous and increasing: y is inside the interval exactly
            # when its CDF is within the two levels. One pass over the samples instead
            # of the 120 of the interval's bisections (T = 10**6 took minutes).
            level = check.number("level", level, 0, 1, low_open=True, high_open=True)
            cdf = self._mixture_cdf(y)
            return float(np.mean((cdf >= (1 - level) / 2) & (cdf <= (1 + level) / 2)))
        lower, upper = self.interval(level)
        return float(np.mean((y >= lower) & (y <= upper)))

    def z_interval(self, level=0.95):
        """mean +- z * stddev: the Gaussian approximation of `interval`.

        Args:
            level: the central probability, in (0, 1).

        Returns:
            (lower, upper), arrays shaped like `mean`.
        """
        level = check.number("level", level, 0, 1, low_open=True, high_open=True)
        z = NormalDist().inv_cdf((1 + level) / 2)
        return self.mean - z * self.stddev, self.mean + z * self.stddev

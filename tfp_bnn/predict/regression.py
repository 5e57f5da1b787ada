"""Monte Carlo predictive distribution of a regression network.

With T weight samples, sample t gives the Gaussian N(mu_t, sigma_t^2) (a
heteroscedastic head predicts sigma_t^2 = exp(s_t); a homoscedastic model
has one noise variance 1/tau for all). The predictive distribution is their
equal mixture, with (seed 004, eq. 67)

    mean      = (1/T) sum_t mu_t
    epistemic = (1/T) sum_t mu_t^2 - mean^2       (variance of the sampled means)
    aleatoric = (1/T) sum_t sigma_t^2             (mean of the predicted variances)
    total     = epistemic + aleatoric

and the log-likelihood of a target by log-mean-exp over the samples (seed
004, eq. 49): log p(y) = logsumexp_t log N(y | mu_t, sigma_t^2) - log T.
Everything is computed in float64.
"""

import math
from statistics import NormalDist

import numpy as np
import tensorflow as tf

from tfp_bnn.predict import engine
from tfp_bnn.predict import limits

OUTPUTS = ("auto", "mean_log_variance", "mean", "distribution")


def check_level(level):
    """`level` as a float in (0, 1); ValueError naming it otherwise."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"`level` must be a number in (0, 1), got {level!r}.")
    return float(level)


def _log_normal(y, mean, variance):
    """log N(y | mean, variance), with variance > 0."""
    return -0.5 * (math.log(2 * math.pi) + np.log(variance) + np.square(y - mean) / variance)


def _normal_cdf(z):
    # erfc keeps the lower tail accurate, where 1 + erf(z) would cancel.
    z = tf.constant(z, tf.float64)
    return (0.5 * tf.math.erfc(-z / math.sqrt(2.0))).numpy()


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
            try:
                variances = np.broadcast_to(variances, means.shape)
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
        self.sample_variances = np.array(variances)
        self.mean = means.mean(axis=0)
        # Two-pass variance: no cancellation when the spread is small against the mean.
        self.epistemic_variance = np.square(means - self.mean).mean(axis=0)
        self.aleatoric_variance = self.sample_variances.mean(axis=0)
        self.total_variance = self.epistemic_variance + self.aleatoric_variance
        self.stddev = np.sqrt(self.total_variance)

    @property
    def num_samples(self):
        return self.sample_means.shape[0]

    def rescale(self, shift=0.0, scale=1.0):
        """The same prediction for targets y' = shift + scale * y.

        Maps predictions on standardised targets back to the data's units
        (e.g. `shift=scaler.mean, scale=scaler.std`); log-likelihoods then
        come out in those units.
        """
        scale = np.asarray(scale, dtype=np.float64)
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise ValueError(f"`scale` must be finite and > 0, got {scale!r}.")
        return RegressionPrediction(shift + scale * self.sample_means,
                                    np.square(scale) * self.sample_variances)

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
        """
        y = self._targets(y)
        if np.any(self.sample_variances == 0):
            raise ValueError(
                "The predictive has zero noise variance, so targets have no density; "
                "predict with a noise variance (`noise_variance=` for a mean-only model)."
            )
        log_densities = _log_normal(y, self.sample_means, self.sample_variances)
        if log_densities.ndim > 2:
            log_densities = log_densities.reshape(log_densities.shape[:2] + (-1,)).sum(-1)
        peak = log_densities.max(axis=0)
        return peak + np.log(np.mean(np.exp(log_densities - peak), axis=0))

    def rmse(self, y):
        """Root mean squared error of the predictive mean (over points and outputs)."""
        y = self._targets(y)
        return float(np.sqrt(np.mean(np.square(self.mean - y))))

    def interval(self, level=0.95):
        """Central prediction interval (lower, upper) of the predictive mixture.

        Exact quantiles (1 - level)/2 and (1 + level)/2 of the mixture of T
        Gaussians, found by bisection on its CDF (60 halvings: below float64
        resolution); without aleatoric noise, empirical quantiles of the
        sampled means.
        """
        level = check_level(level)
        low_q, high_q = (1 - level) / 2, (1 + level) / 2
        if not np.any(self.sample_variances > 0):
            return (np.quantile(self.sample_means, low_q, axis=0),
                    np.quantile(self.sample_means, high_q, axis=0))
        sd = np.sqrt(self.sample_variances)
        reach = 40 * sd.max(axis=0) + 1e-300
        low0 = self.sample_means.min(axis=0) - reach
        high0 = self.sample_means.max(axis=0) + reach
        return self._quantile(low_q, low0, high0, sd), self._quantile(high_q, low0, high0, sd)

    def _quantile(self, q, low, high, sd):
        means = self.sample_means
        with np.errstate(divide="ignore", invalid="ignore"):
            for _ in range(60):
                mid = 0.5 * (low + high)
                z = (mid - means) / sd
                # A zero-variance sample is a step at its mean.
                cdf_t = np.where(sd > 0, _normal_cdf(np.where(sd > 0, z, 0.0)),
                                 (mid >= means).astype(np.float64))
                below = cdf_t.mean(axis=0) < q
                low = np.where(below, mid, low)
                high = np.where(below, high, mid)
        return 0.5 * (low + high)

    def coverage(self, y, level=0.95):
        """Fraction of targets inside the central `level` prediction interval."""
        y = self._targets(y)
        lower, upper = self.interval(level)
        return float(np.mean((y >= lower) & (y <= upper)))

    def z_interval(self, level=0.95):
        """mean +- z * stddev: the Gaussian approximation of `interval`."""
        level = check_level(level)
        z = NormalDist().inv_cdf((1 + level) / 2)
        return self.mean - z * self.stddev, self.mean + z * self.stddev


def regression(model, x, num_samples=100, output="auto", noise_variance=None,
               batch_size=None, samples_per_call=None, max_rows=engine.DEFAULT_MAX_ROWS,
               jit_compile=False):
    """Monte Carlo predictive distribution of a regression model.

    Args:
        model: a built Keras model with tfp_bnn stochastic layers.
        x: inputs of N examples (array, tensor, or list/dict of them).
        num_samples: T >= 1 weight samples.
        output: what the model outputs: "auto" (the default) is
            "distribution" for a model ending in a tfp_bnn distribution
            layer (`IndependentNormal`, `MixtureNormal`, ...: the result is a
            `DistributionPrediction`, exact for the family) and
            "mean_log_variance" otherwise;
            "mean_log_variance": 2 * D values [means, s] with s = log sigma^2
            (`tfp_bnn.layers.HeteroscedasticRegression`,
            `tfp_bnn.losses.GaussianNLL`); "mean": D means, with the
            aleatoric variance `noise_variance` (1/tau, e.g. from
            `tfp_bnn.mc_dropout.model_precision`) or none.
        noise_variance: homoscedastic noise variance for output="mean".
        batch_size, samples_per_call, max_rows, jit_compile: chunking and
            compilation, as in `tfp_bnn.predict.sample`.

    Returns:
        `RegressionPrediction` with the mean, the epistemic / aleatoric /
        total variances, and log_likelihood(y), rmse(y), interval(level),
        coverage(y, level).

    Example:
    >>> pred = tfp_bnn.predict.regression(model, x_test, num_samples=100)
    >>> pred.log_likelihood(y_test).mean(), pred.coverage(y_test, 0.95)
    """
    if output not in OUTPUTS:
        raise ValueError(f"`output` must be one of {OUTPUTS}, got {output!r}.")
    if noise_variance is not None:
        if output != "mean":
            raise ValueError("`noise_variance` is only for output='mean'.")
        noise_variance = float(noise_variance)
        if not math.isfinite(noise_variance) or noise_variance <= 0:
            raise ValueError(f"`noise_variance` must be finite and > 0, got {noise_variance!r}.")
    engine.check_model(model)
    if output == "auto":
        output = "distribution" if engine.has_distribution_head(model) else "mean_log_variance"
    if output == "distribution":
        if noise_variance is not None:
            raise ValueError("`noise_variance` is only for output='mean'; a distribution "
                             "head predicts its own noise.")
        from tfp_bnn.predict.distribution import collect  # noqa: PLC0415 - import cycle
        return collect(model, x, num_samples, batch_size=batch_size,
                       samples_per_call=samples_per_call, max_rows=max_rows,
                       jit_compile=jit_compile)
    x, _, count = engine.as_arrays(x, model)
    size = limits.static_output_size(model)
    if output == "mean_log_variance":
        limits.check_results(model, num_samples, count, "The sampled means and variances",
                             copies=2, per_example=size // 2)
    else:
        limits.check_results(model, num_samples, count, "The sampled means")
    store = {}

    def consume(t0, t1, n0, n1, outputs):
        if not isinstance(outputs, np.ndarray):
            raise ValueError("regression() needs a model with a single output tensor.")
        if output == "mean_log_variance":
            if outputs.shape[-1] % 2:
                raise ValueError(
                    "output='mean_log_variance' needs an even last axis [means, log "
                    f"variances], got model outputs of shape {outputs.shape[1:]} per sample."
                )
            half = outputs.shape[-1] // 2
            means, log_vars = outputs[..., :half], outputs[..., half:]
        else:
            means, log_vars = outputs, None
        if "means" not in store:
            shape = (num_samples, count) + means.shape[2:]
            limits.check_storage((2,) + shape, np.float64, "The sampled means and variances")
            store["means"] = np.empty(shape, np.float64)
            store["vars"] = np.empty(shape, np.float64) if log_vars is not None else None
        store["means"][t0:t1, n0:n1] = means
        if log_vars is not None:
            store["vars"][t0:t1, n0:n1] = np.exp(log_vars.astype(np.float64))

    engine.run(model, x, num_samples, consume, batch_size=batch_size,
               samples_per_call=samples_per_call, max_rows=max_rows, jit_compile=jit_compile,
               values_of=repr(output))
    variances = store["vars"] if noise_variance is None else noise_variance
    return RegressionPrediction(store["means"], variances)

"""Monte Carlo predictive of a model whose output is a distribution.

With T weight samples, sample t gives the output distribution p(y | x, w_t)
of the model's distribution layer (`tfp_bnn.layers.IndependentNormal`,
`MixtureNormal`, `IndependentPoisson`, `DistributionLambda`, ...). The
predictive is their equal mixture (Gal and Ghahramani 2016; Kendall and Gal 2017):

    mean      = (1/T) sum_t E[y | w_t]
    epistemic = variance over t of E[y | w_t]
    aleatoric = (1/T) sum_t Var[y | w_t]
    log p(y)  = logsumexp_t log p(y | x, w_t) - log T

so the split holds for any family with a mean and a variance, and the
log-likelihood is exact for any family (not a Gaussian approximation).
"""

import math

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn import noise
from tfp_bnn._substrate import tfp
from tfp_bnn.predict import _chunk_math
from tfp_bnn.predict import engine
from tfp_bnn.predict import limits
from tfp_bnn.predict.regression_prediction import RegressionPrediction

tfd = tfp.distributions

# Draws per point for the Monte Carlo interval of a non-Normal family.
_INTERVAL_DRAWS = 4000
# Distribution objects a prediction keeps: each is ~10 KB of Python objects
# beyond its tensors, so 10^5 of them are ~1 GB of overhead.
MAX_KEPT_CALLS = 100_000


def _is_normal(distribution):
    while isinstance(distribution, tfd.Independent):
        distribution = distribution.distribution
    return isinstance(distribution, tfd.Normal)


class DistributionPrediction(RegressionPrediction):
    """The predictive mixture of T output distributions per point.

    Built by `tfp_bnn.predict.distribution(model, x)` (and by
    `tfp_bnn.predict.regression` for a model with a distribution head). It
    has everything `RegressionPrediction` has -- mean, epistemic / aleatoric
    / total variance, rmse, coverage -- with `log_likelihood` exact for the
    model's family and `interval` exact for Normal families, else from
    4,000 draws of the mixture per point.

    Attributes:
        sample_distributions: list of (t0, t1, n0, n1, distribution): the
            distribution of samples t0..t1-1 at points n0..n1-1, batch axis
            sample-major.

    Args:
        sample_means: array [T, N, D] of the sampled distributions' means.
        sample_variances: array [T, N, D] of their variances.
        sample_distributions: the list of the `sample_distributions`
            attribute.

    Example:
    >>> normal = tfp.distributions.Normal(tf.zeros([2, 1]), 1.0)   # T = 2, N = 1, D = 1
    >>> pred = DistributionPrediction(np.zeros((2, 1, 1)), np.ones((2, 1, 1)),
    ...                               [(0, 2, 0, 1, normal)])
    >>> pred.log_likelihood(np.zeros((1, 1))).round(4)   # log N(0; 0, 1)
    array([-0.9189])
    """

    def __init__(self, sample_means, sample_variances, sample_distributions):
        super().__init__(sample_means, sample_variances)
        self.sample_distributions = list(sample_distributions)

    def rescale(self, shift=0.0, scale=1.0):
        raise ValueError("A distribution prediction cannot be rescaled: its log-likelihood "
                         "comes from the model's own family; train on the targets' own units "
                         "or rescale the targets you score.")

    def sample_log_prob(self, y):
        """log p(y | x, w_t) per sample and point, [T, N] (outputs of a point summed).

        Args:
            y: targets [N, D] (or [N]).

        Returns:
            A float64 array [T, N].
        """
        y = self._targets(y)
        out = np.empty((self.num_samples, y.shape[0]))
        for t0, t1, n0, n1, distribution in self.sample_distributions:
            size = t1 - t0
            # [size * (n1 - n0), ...]: the targets of the points, once per sample.
            chunk = np.tile(y[n0:n1], (size,) + (1,) * (y.ndim - 1))
            dtype = keras.backend.standardize_dtype(distribution.dtype)
            chunk = keras.ops.convert_to_tensor(
                chunk, dtype if keras.backend.is_float_dtype(dtype) else "float32")
            log_p = np.asarray(distribution.log_prob(chunk), np.float64)
            out[t0:t1, n0:n1] = log_p.reshape(size, n1 - n0, -1).sum(-1)
        return out

    def log_likelihood(self, y):
        """Predictive log density of each target by log-mean-exp over samples; [N].

        Args:
            y: targets [N, D] (or [N]).

        Returns:
            A float64 array [N].
        """
        log_p = self.sample_log_prob(y)
        peak = log_p.max(axis=0)
        return peak + np.log(np.mean(np.exp(log_p - peak), axis=0))

    def _gaussian(self):
        return all(_is_normal(d) for *_, d in self.sample_distributions)

    def interval(self, level=0.95):
        """Central `level` prediction interval of the predictive mixture, per point.

        Args:
            level: the central probability, in (0, 1).

        Returns:
            (lower, upper), arrays [N, D].
        """
        if self._gaussian():
            return super().interval(level)
        level = check.number("level", level, 0, 1, low_open=True, high_open=True)
        per_sample = math.ceil(_INTERVAL_DRAWS / self.num_samples)
        draws = np.empty((per_sample, self.num_samples) + self.mean.shape)
        for index, (t0, t1, n0, n1, distribution) in enumerate(self.sample_distributions):
            values = distribution.sample(per_sample, seed=noise.seed_pair(index, 20261124))
            draws[:, t0:t1, n0:n1] = np.asarray(values, np.float64).reshape(
                (per_sample, t1 - t0, n1 - n0) + self.mean.shape[1:])
        draws = draws.reshape((-1,) + self.mean.shape)
        return (np.quantile(draws, (1 - level) / 2, axis=0),
                np.quantile(draws, (1 + level) / 2, axis=0))


def collect(model, plan, jit_compile=False):
    """Runs the model's distribution head on a checked `engine.Plan`; a `DistributionPrediction`."""
    num_samples, count = plan.num_samples, plan.count
    limits.check_results(model, num_samples, count, "The sampled means and variances",
                         copies=2)
    # The prediction keeps each call's distribution (for the exact log-likelihood).
    calls, per_call = engine.distribution_chunks(plan)
    if calls > MAX_KEPT_CALLS:
        # On JAX a distribution holds one sample group whatever `samples_per_call` is.
        larger = "`samples_per_call`, " if per_call == plan.samples_per_call else ""
        raise ValueError(
            f"distribution() keeps one distribution object per traced call; "
            f"{calls:,} calls ({num_samples:,} samples in chunks of {per_call:,}, "
            f"{count:,} inputs in batches of {plan.batch_size:,}) are over the limit of "
            f"{MAX_KEPT_CALLS:,}: pass a larger {larger}`batch_size` or `max_rows`.")
    means = variances = None
    kept = []
    for chunk in engine.chunks(model, plan, jit_compile=jit_compile, distributions=True):
        chunk_means, chunk_variances = _chunk_math.distribution_terms(chunk.outputs,
                                                                      chunk.t1 - chunk.t0)
        if means is None:
            shape = (num_samples, count) + tuple(chunk_means.shape[2:])
            limits.check_storage((2,) + shape, np.float64, "The sampled means and variances")
            means = np.empty(shape)
            variances = None if chunk_variances is None else np.empty(shape)
        means[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = chunk_means
        if variances is not None:
            variances[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = chunk_variances
        kept.append(chunk)
    return DistributionPrediction(means, variances, kept)


def distribution(model, x, num_samples=100, batch_size=None, samples_per_call=None,
                 max_rows=engine.DEFAULT_MAX_ROWS, jit_compile=False):
    """Monte Carlo predictive of a model ending in a tfp_bnn distribution layer.

    Args:
        model: a built Keras model whose output is a distribution layer's
            (`tfp_bnn.layers.IndependentNormal`, `MixtureNormal`,
            `IndependentPoisson`, `DistributionLambda`, ...).
        x: inputs of N examples (array, tensor, or list/dict of them).
        num_samples: T >= 1 weight samples.
        batch_size: inputs per traced call (default min(N, 1024)).
        samples_per_call: weight samples per traced call (default: as many
            as keep samples_per_call * batch_size <= max_rows).
        max_rows: memory bound in tiled rows per call, used for the
            default samples_per_call.
        jit_compile: compile the traced calls with XLA.

    Returns:
        `DistributionPrediction`: mean, epistemic / aleatoric / total
        variance, exact `log_likelihood(y)`, `rmse(y)`, `interval(level)`,
        `coverage(y, level)`.

    Example:
    >>> x = np.random.rand(6, 3).astype("float32")
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2),
    ...                           tfp_bnn.layers.IndependentNormal(1)])
    >>> pred = tfp_bnn.predict.distribution(model, x, num_samples=50)
    >>> pred.log_likelihood(np.zeros(6)).shape, pred.epistemic_variance.shape
    ((6,), (6, 1))
    """
    plan = engine.prepare(model, x, num_samples, batch_size, samples_per_call, max_rows)
    return collect(model, plan, jit_compile=jit_compile)

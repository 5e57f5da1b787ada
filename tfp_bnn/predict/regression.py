"""Monte Carlo predictive distribution of a regression network.

With T weight samples, sample t gives the Gaussian N(mu_t, sigma_t^2) (a
heteroscedastic head predicts sigma_t^2 = exp(s_t); a homoscedastic model
has one noise variance 1/tau for all). The predictive distribution is their
equal mixture, with (Kendall and Gal 2017)

    mean      = (1/T) sum_t mu_t
    epistemic = (1/T) sum_t mu_t^2 - mean^2       (variance of the sampled means)
    aleatoric = (1/T) sum_t sigma_t^2             (mean of the predicted variances)
    total     = epistemic + aleatoric

and the log-likelihood of a target by log-mean-exp over the samples (seed
004, eq. 49): log p(y) = logsumexp_t log N(y | mu_t, sigma_t^2) - log T.
Everything is computed in float64.
"""

import numpy as np

from tfp_bnn import _predictive
from tfp_bnn import _validation as check
from tfp_bnn.predict import _chunk_math
from tfp_bnn.predict import engine
from tfp_bnn.predict import limits
from tfp_bnn.predict.distribution import collect
from tfp_bnn.predict.regression_prediction import RegressionPrediction

OUTPUTS = ("auto",) + _predictive.REGRESSION_OUTPUTS


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
        batch_size: inputs per traced call (default min(N, 1024)).
        samples_per_call: weight samples per traced call (default: as many
            as keep samples_per_call * batch_size <= max_rows).
        max_rows: memory bound in tiled rows per call, used for the
            default samples_per_call.
        jit_compile: compile the traced calls with XLA (on JAX they always are).

    Returns:
        `RegressionPrediction` with the mean, the epistemic / aleatoric /
        total variances, and log_likelihood(y), rmse(y), interval(level),
        coverage(y, level).

    Example:
    >>> x = np.random.rand(6, 3).astype("float32")
    >>> model = keras.Sequential([keras.Input((3,)),
    ...                           tfp_bnn.layers.HeteroscedasticRegression(1, projection="flipout")])
    >>> pred = tfp_bnn.predict.regression(model, x, num_samples=100)
    >>> pred.mean.shape, pred.epistemic_variance.shape
    ((6, 1), (6, 1))
    >>> ll, covered = pred.log_likelihood(np.zeros(6)).mean(), pred.coverage(np.zeros(6), 0.95)
    """
    check.one_of("output", output, OUTPUTS)
    if noise_variance is not None:
        if output != "mean":
            raise ValueError("`noise_variance` is only for output='mean'.")
        noise_variance = check.positive("noise_variance", noise_variance)
    plan = engine.prepare(model, x, num_samples, batch_size, samples_per_call, max_rows)
    if output == "auto":
        output = "distribution" if engine.has_distribution_head(model) else "mean_log_variance"
    if output == "distribution":
        return collect(model, plan, jit_compile=jit_compile)
    copies, per_example = (2, limits.static_output_size(model) // 2) if (
        output == "mean_log_variance") else (1, None)
    limits.check_results(model, plan.num_samples, plan.count, "The sampled means and variances"
                         if copies == 2 else "The sampled means", copies=copies,
                         per_example=per_example)
    means = variances = None
    for chunk in engine.chunks(model, plan, jit_compile=jit_compile, values_of=repr(output)):
        if not isinstance(chunk.outputs, np.ndarray):
            raise ValueError("regression() needs a model with a single output tensor.")
        chunk_means, chunk_variances = _chunk_math.regression_terms(chunk.outputs, output)
        if means is None:
            shape = (plan.num_samples, plan.count) + tuple(chunk_means.shape[2:])
            limits.check_storage((2,) + shape, np.float64, "The sampled means and variances")
            means = np.empty(shape, np.float64)
            variances = None if chunk_variances is None else np.empty(shape, np.float64)
        means[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = chunk_means
        if variances is not None:
            variances[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = chunk_variances
    return RegressionPrediction(means, variances if noise_variance is None else noise_variance)

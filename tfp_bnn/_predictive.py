"""The Monte Carlo predictive's vocabulary and per-chunk math, shared by predict/ and export.

`tfp_bnn.predict` (NumPy results, float64) and `tfp_bnn.export.export_predictive` (a served
graph, float32) read a model's sampled outputs with the same functions here, and name what they
return with the same words:

- what a model outputs (`output=`): `REGRESSION_OUTPUTS`, `CLASSIFICATION_OUTPUTS`;
- what a predictive returns: `REGRESSION_SUMMARIES` (Kendall and Gal 2017) and
  `CLASSIFICATION_SUMMARIES` (Houlsby et al. 2011), made by `regression_summaries` and
  `classification_summaries`; `RegressionPrediction.summaries()` and
  `ClassificationPrediction.summaries()` return the dict the export serves.

Every function takes tensors or NumPy arrays [S, B, ...] (S weight samples of B inputs) and
computes in `dtype`.
"""

import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn.distributions.classes import class_log_probabilities

REGRESSION_OUTPUTS = ("mean_log_variance", "mean", "distribution")
CLASSIFICATION_OUTPUTS = ("logits", "probabilities", "log_probabilities", "distribution")
TASKS = {"regression": REGRESSION_OUTPUTS, "classification": CLASSIFICATION_OUTPUTS}

REGRESSION_SUMMARIES = ("mean", "stddev", "epistemic_variance", "aleatoric_variance")
CLASSIFICATION_SUMMARIES = ("probabilities", "predictive_entropy", "expected_entropy",
                            "mutual_information")


def per_sample(values, num_samples, dtype):
    """[S * B, ...] sample-major (a distribution head's batch) -> [S, B, ...] in `dtype`."""
    values = tf.cast(values, dtype)
    return tf.reshape(values, tf.concat([[num_samples, -1], tf.shape(values)[1:]], 0))


def regression_terms(outputs, output, num_samples=None, dtype="float64"):
    """(means, variances) [S, B, D] of sampled outputs; variances None for output="mean".

    "mean_log_variance" outputs are [means, log variances] on the last axis; "distribution"
    outputs are a distribution head's output distribution with batch S * B (then
    `num_samples` is S), read through its mean and variance (None if it has none).
    """
    if output == "distribution":
        means, variances = distribution_moments(outputs)
        return (per_sample(means, num_samples, dtype),
                None if variances is None else per_sample(variances, num_samples, dtype))
    outputs = tf.cast(outputs, dtype)
    if output == "mean":
        return outputs, None
    width = outputs.shape[-1]
    if width is not None and width % 2:
        raise ValueError("output='mean_log_variance' needs an even last axis [means, log "
                         f"variances], got model outputs of shape {tuple(outputs.shape[1:])} "
                         "per sample.")
    means, log_variances = tf.split(outputs, 2, axis=-1)
    return means, tf.exp(log_variances)


def distribution_moments(distribution):
    """(mean, variance) of an output distribution, the variance None if it has none.

    Raises:
        ValueError: if it has no mean (a classifier's: see `class_log_probs`).
    """
    try:
        mean = distribution.mean()
    except NotImplementedError:
        raise ValueError(
            f"The model's output distribution ({type(distribution).__name__}) has no mean; "
            "for class labels use tfp_bnn.predict.classification.") from None
    try:
        return mean, distribution.variance()
    except NotImplementedError:
        return mean, None


def class_log_probs(outputs, output, num_samples=None, dtype="float64"):
    """log p(class) [S, B, K] of sampled outputs of kind `output` (see CLASSIFICATION_OUTPUTS).

    For output="distribution", `outputs` is the class distribution with batch S * B.
    """
    if output == "distribution":
        return per_sample(class_log_probabilities(outputs, dtype), num_samples, dtype)
    outputs = tf.cast(outputs, dtype)
    if output == "logits":
        return tf.nn.log_softmax(outputs)
    if output == "probabilities":
        return tf.math.log(outputs)
    return outputs


def entropy(probs, log_probs):
    """-sum_k p log p over the last axis, with 0 log 0 = 0 (nats)."""
    return -tf.reduce_sum(tf.where(probs > 0, probs * tf.where(probs > 0, log_probs, 0), 0), -1)


def _expand(weights, rank):
    return tf.reshape(weights, [-1] + [1] * (rank - 1))


def weighted_sum(values, weights=None):
    """sum_t w_t values_t over the samples axis 0; `weights` [S] default to ones.

    A weight is 1 for a real sample and 0 for the padding of a fixed-size chunk.
    """
    values = tf.convert_to_tensor(values)
    if weights is None:
        return tf.reduce_sum(values, 0)
    weights = tf.cast(weights, values.dtype)
    return tf.reduce_sum(_expand(weights, values.shape.rank) * values, 0)


def class_sums(log_probs, weights=None):
    """(sum_t w_t p_t [B, K], sum_t w_t H[p_t] [B]) over the S samples of one chunk."""
    probs = tf.exp(log_probs)
    return weighted_sum(probs, weights), weighted_sum(entropy(probs, log_probs), weights)


def merge_moments(state, values, weights):
    """Folds weighted samples [S, ...] into (count, mean, sum of squared deviations).

    Chan et al. (1979): exact for chunks of any size, no cancellation.
    """
    count, mean, m2 = state
    w = _expand(tf.cast(weights, values.dtype), values.shape.rank)
    n = tf.reduce_sum(w)
    chunk_mean = tf.reduce_sum(w * values, 0) / n
    chunk_m2 = tf.reduce_sum(w * tf.square(values - chunk_mean), 0)
    total = count + n
    delta = chunk_mean - mean
    return total, mean + delta * (n / total), m2 + chunk_m2 + tf.square(delta) * (count * n / total)


def regression_summaries(mean, epistemic_variance, aleatoric_variance):
    """The REGRESSION_SUMMARIES of a predictive mixture, as a dict."""
    return {"mean": mean, "stddev": tf.sqrt(epistemic_variance + aleatoric_variance),
            "epistemic_variance": epistemic_variance, "aleatoric_variance": aleatoric_variance}


def classification_summaries(probabilities, expected_entropy):
    """The CLASSIFICATION_SUMMARIES of predictive probabilities [N, K] and E[H] [N], a dict.

    The mutual information H[p] - E[H] is >= 0 by Jensen; float rounding is clipped.
    """
    probabilities = tf.convert_to_tensor(probabilities)
    tiny = np.finfo(probabilities.dtype.as_numpy_dtype).tiny
    log_probs = tf.math.log(tf.maximum(probabilities, tiny))
    predictive = entropy(probabilities, log_probs)
    expected = tf.cast(expected_entropy, probabilities.dtype)
    return {"probabilities": probabilities, "predictive_entropy": predictive,
            "expected_entropy": expected,
            "mutual_information": tf.maximum(predictive - expected, 0)}

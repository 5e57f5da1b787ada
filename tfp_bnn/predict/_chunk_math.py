"""The predictive's per-chunk math for the active Keras backend, in float64.

On TensorFlow these are `tfp_bnn._predictive`'s functions, the ones the exported
predictive serves, so that `tfp_bnn.predict` and a served model give the same
numbers. On JAX they are NumPy twins of them: the results are float64 NumPy arrays
either way, and NumPy computes them without starting TensorFlow's runtime next to
JAX's (on an accelerator both would claim its memory) and without JAX's 64-bit mode,
which is off by default (JAX would compute "float64" in float32).

Every function takes NumPy arrays [S, B, ...] (S samples of B inputs) or the
[N, ...] summaries, as its `_predictive` namesake does.
"""

import math

import numpy as np

from tfp_bnn import _backend
from tfp_bnn import _predictive
from tfp_bnn.distributions.classes import class_logits


def regression_terms(outputs, output):
    """(means, variances) [S, B, D] of sampled outputs; variances None for output="mean"."""
    if not _backend.is_jax():
        return _predictive.regression_terms(outputs, output)
    values = np.asarray(outputs, np.float64)
    if output == "mean":
        return values, None
    if values.shape[-1] % 2:
        raise ValueError("output='mean_log_variance' needs an even last axis [means, log "
                         f"variances], got model outputs of shape {tuple(values.shape[1:])} "
                         "per sample.")
    means, log_variances = np.split(values, 2, axis=-1)
    return means, np.exp(log_variances)


def class_log_probs(outputs, output):
    """log p(class) [S, B, K] of sampled "logits", "probabilities" or "log_probabilities"."""
    if not _backend.is_jax():
        return np.asarray(_predictive.class_log_probs(outputs, output))
    values = np.asarray(outputs, np.float64)
    if output == "logits":
        shifted = values - values.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    if output == "probabilities":
        with np.errstate(divide="ignore"):  # log 0 = -inf, as tf.math.log
            return np.log(values)
    return values


def _per_sample(values, num_samples):
    """[S * B, ...] sample-major (a distribution head's batch) -> [S, B, ...] in float64."""
    values = np.asarray(values, np.float64)
    return values.reshape((num_samples, -1) + values.shape[1:])


def distribution_terms(distribution, num_samples):
    """(means, variances) [S, B, D] of an output distribution of batch S * B (sample-major);
    variances None if the family has none."""
    if not _backend.is_jax():
        return _predictive.regression_terms(distribution, "distribution", num_samples)
    means, variances = _predictive.distribution_moments(distribution)
    return (_per_sample(means, num_samples),
            None if variances is None else _per_sample(variances, num_samples))


def distribution_class_log_probs(distribution, num_samples):
    """log p(class) [S, B, K] of a class distribution of batch S * B (sample-major)."""
    if not _backend.is_jax():
        return np.asarray(_predictive.class_log_probs(distribution, "distribution", num_samples))
    kind, logits = class_logits(distribution)
    logits = np.asarray(logits, np.float64)
    if kind == "categorical":
        log_probs = class_log_probs(logits, "logits")
    else:  # the classes [0, 1] of a Bernoulli: log sigmoid(-l), log sigmoid(l)
        logits = logits.reshape(-1, 1)
        log_probs = -np.logaddexp(0.0, np.concatenate([logits, -logits], -1))
    return _per_sample(log_probs, num_samples)


def _entropy(probs, log_probs):
    """-sum_k p log p over the last axis, with 0 log 0 = 0 (nats)."""
    positive = probs > 0
    return -np.where(positive, probs * np.where(positive, log_probs, 0.0), 0.0).sum(axis=-1)


def class_sums(log_probs):
    """(sum_t p_t [B, K], sum_t H[p_t] [B]) over the S samples of one chunk."""
    if not _backend.is_jax():
        return tuple(np.asarray(v) for v in _predictive.class_sums(log_probs))
    probs = np.exp(log_probs)
    return probs.sum(axis=0), _entropy(probs, log_probs).sum(axis=0)


def regression_summaries(mean, epistemic_variance, aleatoric_variance):
    """The `_predictive.REGRESSION_SUMMARIES` of a predictive mixture, a dict of arrays."""
    if not _backend.is_jax():
        summaries = _predictive.regression_summaries(mean, epistemic_variance,
                                                     aleatoric_variance)
        return {name: np.asarray(value) for name, value in summaries.items()}
    return {"mean": np.asarray(mean),
            "stddev": np.sqrt(epistemic_variance + aleatoric_variance),
            "epistemic_variance": np.asarray(epistemic_variance),
            "aleatoric_variance": np.asarray(aleatoric_variance)}


def classification_summaries(probabilities, expected_entropy):
    """The `_predictive.CLASSIFICATION_SUMMARIES` of probabilities [N, K] and E[H] [N].

    The mutual information H[p] - E[H] is >= 0 by Jensen; float rounding is clipped.
    """
    if not _backend.is_jax():
        summaries = _predictive.classification_summaries(probabilities, expected_entropy)
        return {name: np.asarray(value) for name, value in summaries.items()}
    probabilities = np.asarray(probabilities)
    log_probs = np.log(np.maximum(probabilities, np.finfo(probabilities.dtype).tiny))
    predictive = _entropy(probabilities, log_probs)
    expected = np.asarray(expected_entropy, probabilities.dtype)
    return {"probabilities": probabilities, "predictive_entropy": predictive,
            "expected_entropy": expected,
            "mutual_information": np.maximum(predictive - expected, 0)}


def normal_cdf(z):
    """Phi(z) in float64; erfc keeps the lower tail accurate, where 1 + erf(z) would cancel."""
    if not _backend.is_jax():
        import tensorflow as tf  # noqa: PLC0415 - the TensorFlow path's own kernel

        return (0.5 * tf.math.erfc(-tf.constant(z, tf.float64) / math.sqrt(2.0))).numpy()
    from scipy import special  # noqa: PLC0415 - a dependency of jax, so there on JAX

    return 0.5 * special.erfc(-np.asarray(z, np.float64) / math.sqrt(2.0))

"""The per-chunk predictive math: TensorFlow's functions on TensorFlow, NumPy twins on JAX.

Both backends' versions are checked against the same NumPy references and edge cases,
so that they agree with each other.
"""

import math

import numpy as np
import pytest

from tfp_bnn._substrate import tfd
from tfp_bnn.predict import _chunk_math

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(0)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_regression_terms_split_means_and_log_variances():
    outputs = RNG.normal(size=(4, 3, 6)).astype(np.float32)
    means, variances = _chunk_math.regression_terms(outputs, "mean_log_variance")
    np.testing.assert_array_equal(np.asarray(means), outputs[..., :3].astype(np.float64))
    np.testing.assert_allclose(np.asarray(variances), np.exp(outputs[..., 3:].astype(np.float64)),
                               rtol=1e-15)
    assert np.asarray(means).dtype == np.float64
    only_means, none = _chunk_math.regression_terms(outputs, "mean")
    assert none is None and np.asarray(only_means).shape == (4, 3, 6)
    with pytest.raises(ValueError, match=r"even last axis .* shape \(3, 5\) per sample"):
        _chunk_math.regression_terms(outputs[..., :5], "mean_log_variance")


@pytest.mark.parametrize("output", ["logits", "probabilities", "log_probabilities"])
def test_class_log_probs_of_every_kind(output):
    logits = RNG.normal(scale=3.0, size=(5, 4, 3))
    expected = _log_softmax(logits)
    values = {"logits": logits, "probabilities": np.exp(expected),
              "log_probabilities": expected}[output]
    np.testing.assert_allclose(_chunk_math.class_log_probs(values, output), expected,
                               rtol=1e-12, atol=1e-14)


def test_distribution_terms_are_per_sample_means_and_variances():
    loc = RNG.normal(size=(2 * 3, 1)).astype(np.float32)  # S = 2 samples of B = 3 points
    normal = tfd.Independent(tfd.Normal(loc, np.float32(0.5)), 1)
    means, variances = _chunk_math.distribution_terms(normal, 2)
    np.testing.assert_array_equal(np.asarray(means), loc.reshape(2, 3, 1).astype(np.float64))
    np.testing.assert_allclose(np.asarray(variances), 0.25, rtol=1e-7)
    assert np.asarray(means).dtype == np.float64


@pytest.mark.parametrize("family", ["categorical", "bernoulli"])
def test_distribution_class_log_probs(family):
    logits = RNG.normal(scale=3.0, size=(2 * 4, 3 if family == "categorical" else 1))
    if family == "categorical":
        distribution, expected = tfd.Categorical(logits=logits.astype(np.float32)), logits
    else:  # classes [0, 1]: logits [0, l]
        distribution = tfd.Independent(tfd.Bernoulli(logits=logits.astype(np.float32)), 1)
        expected = np.concatenate([np.zeros_like(logits), logits], -1)
    expected = _log_softmax(expected.astype(np.float32).astype(np.float64)).reshape(2, 4, -1)
    np.testing.assert_allclose(_chunk_math.distribution_class_log_probs(distribution, 2),
                               expected, rtol=1e-12, atol=1e-12)


def test_extreme_logits_and_zero_probabilities_stay_exact():
    log_p = _chunk_math.class_log_probs(np.array([[[1e3, -1e3, 0.0]]]), "logits")
    np.testing.assert_allclose(log_p, [[[0.0, -2e3, -1e3]]], rtol=1e-15)
    log_zero = _chunk_math.class_log_probs(np.array([[[1.0, 0.0]]]), "probabilities")
    assert log_zero[0, 0, 1] == -np.inf
    # 0 log 0 = 0: a certain sample has zero entropy.
    probs_sum, entropy_sum = _chunk_math.class_sums(log_zero)
    np.testing.assert_array_equal(np.asarray(probs_sum), [[1.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(entropy_sum), [0.0])


def test_class_sums_add_probabilities_and_entropies_over_samples():
    log_p = _log_softmax(RNG.normal(size=(6, 4, 3)))
    probs_sum, entropy_sum = _chunk_math.class_sums(log_p)
    probs = np.exp(log_p)
    np.testing.assert_allclose(np.asarray(probs_sum), probs.sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(entropy_sum),
                               -(probs * log_p).sum(axis=-1).sum(axis=0), rtol=1e-13)


def test_summaries_dicts():
    mean, epistemic, aleatoric = np.array([1.0, 2.0]), np.array([0.5, 0.0]), np.array([0.5, 4.0])
    regression = _chunk_math.regression_summaries(mean, epistemic, aleatoric)
    assert sorted(regression) == ["aleatoric_variance", "epistemic_variance", "mean", "stddev"]
    np.testing.assert_array_equal(regression["stddev"], [1.0, 2.0])
    probabilities = np.array([[0.5, 0.5], [1.0, 0.0]])
    classification = _chunk_math.classification_summaries(probabilities, np.array([0.25, 0.1]))
    np.testing.assert_allclose(classification["predictive_entropy"], [math.log(2), 0.0],
                               rtol=1e-15)
    # H[p] - E[H], clipped at 0 where rounding (or a bad E[H]) would make it negative.
    np.testing.assert_allclose(classification["mutual_information"], [math.log(2) - 0.25, 0.0],
                               rtol=1e-15)
    assert all(isinstance(v, np.ndarray) for v in classification.values())


def test_normal_cdf_keeps_the_lower_tail():
    z = np.array([-30.0, -5.0, 0.0, 1.5, 8.0])
    expected = [0.5 * math.erfc(-v / math.sqrt(2.0)) for v in z]
    np.testing.assert_allclose(_chunk_math.normal_cdf(z), expected, rtol=1e-13)

"""Classification summaries: entropy decomposition by hand, metrics, extreme logits."""

import math

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import HeteroscedasticClassification
from tfp_bnn.predict import ClassificationPrediction

LOG2 = math.log(2.0)


@pytest.mark.jax
def test_disagreeing_confident_samples_are_all_epistemic():
    # Sample 1 says class 0 for sure, sample 2 class 1: p = [.5, .5].
    pred = ClassificationPrediction.from_samples([[[1.0, 0.0]], [[0.0, 1.0]]])
    np.testing.assert_allclose(pred.probs, [[0.5, 0.5]])
    assert pred.predictive_entropy[0] == pytest.approx(LOG2)
    assert pred.expected_entropy[0] == 0.0
    assert pred.mutual_information[0] == pytest.approx(LOG2)


@pytest.mark.jax
def test_agreeing_uncertain_samples_are_all_aleatoric():
    pred = ClassificationPrediction.from_samples([[[0.5, 0.5]], [[0.5, 0.5]]])
    assert pred.predictive_entropy[0] == pytest.approx(LOG2)
    assert pred.expected_entropy[0] == pytest.approx(LOG2)
    assert pred.mutual_information[0] == 0.0


@pytest.mark.jax
def test_mixed_case_by_hand():
    # p_1 = [.8, .2], p_2 = [.4, .6]: p = [.6, .4].
    pred = ClassificationPrediction.from_samples([[[0.8, 0.2]], [[0.4, 0.6]]])

    def h(p):
        return -sum(q * math.log(q) for q in p)

    assert pred.predictive_entropy[0] == pytest.approx(h([0.6, 0.4]), rel=1e-12)
    assert pred.expected_entropy[0] == pytest.approx((h([0.8, 0.2]) + h([0.4, 0.6])) / 2,
                                                     rel=1e-12)
    assert pred.mutual_information[0] == pytest.approx(
        h([0.6, 0.4]) - (h([0.8, 0.2]) + h([0.4, 0.6])) / 2, rel=1e-12)


@pytest.mark.jax
def test_metrics_of_the_predictive():
    pred = ClassificationPrediction.from_samples([[[0.9, 0.1], [0.3, 0.7]],
                                                  [[0.7, 0.3], [0.1, 0.9]]])
    # p = [[.8, .2], [.2, .8]]; labels [0, 0]: one right, one wrong.
    labels = [0, 0]
    assert pred.accuracy(labels) == 0.5
    assert pred.nll(labels) == pytest.approx(-(math.log(0.8) + math.log(0.2)) / 2)
    assert pred.brier(labels) == pytest.approx((2 * 0.2**2 + 2 * 0.8**2) / 2)
    # Both confidences 0.8 fall in one bin with accuracy 0.5: ECE = 0.3.
    assert pred.ece(labels, num_bins=10) == pytest.approx(0.3)


@pytest.mark.jax
def test_ood_auroc_from_scores():
    confident = ClassificationPrediction.from_samples([[[0.99, 0.01], [0.95, 0.05]]])
    uncertain = ClassificationPrediction.from_samples([[[0.5, 0.5], [0.6, 0.4]]])
    for score in ("predictive_entropy", "one_minus_max_probability"):
        assert confident.ood_auroc(uncertain, score=score) == 1.0
        assert uncertain.ood_auroc(confident, score=score) == 0.0
    with pytest.raises(ValueError, match="name"):
        confident.score("variance")


@pytest.mark.jax
def test_extreme_logits_stay_finite():
    logits = np.array([[[1e3, -1e3, 0.0]], [[-1e3, 1e3, 0.0]]])
    pred = ClassificationPrediction.from_samples(logits, output="logits")
    assert np.all(np.isfinite(pred.probs))
    assert pred.mutual_information[0] == pytest.approx(LOG2)
    assert np.isfinite(pred.nll([2]))


@pytest.mark.jax
def test_classification_of_a_model_streams_the_same_numbers():
    model = keras.Sequential([keras.Input((4,)),
                              DenseFlipout(8, activation="relu", kl_weight=0.0, seed=0),
                              DenseFlipout(3, kl_weight=0.0, seed=1)])
    x = np.random.default_rng(0).normal(size=(7, 4)).astype("float32")
    pred = tfp_bnn.predict.classification(model, x, num_samples=9, keep_samples=True,
                                          batch_size=3, samples_per_call=4)
    assert pred.sample_probs.shape == (9, 7, 3)
    again = ClassificationPrediction.from_samples(pred.sample_probs)
    np.testing.assert_allclose(pred.probs, again.probs, rtol=1e-12)
    np.testing.assert_allclose(pred.expected_entropy, again.expected_entropy, rtol=1e-12)
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-12)
    assert np.all(pred.mutual_information >= 0)


def test_heteroscedastic_head_outputs_log_probabilities():
    model = keras.Sequential([keras.Input((4,)),
                              HeteroscedasticClassification(3, num_samples=20, seed=0)])
    x = np.random.default_rng(1).normal(size=(5, 4)).astype("float32")
    pred = tfp_bnn.predict.classification(model, x, num_samples=4, output="log_probabilities")
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.jax
@pytest.mark.parametrize(
    "samples, output, message",
    [
        ([[[0.5, 0.6]]], "probabilities", "do not sum to 1"),
        ([[[1.5, -0.5]]], "probabilities", r"\[0, 1\]"),
        ([[[np.nan, 0.5]]], "probabilities", "NaN"),
        ([[[0.0, 0.0]]], "log_probabilities", "do not sum to 1"),
        ([[[1.0]]], "probabilities", ">= 2 classes"),
        (np.zeros((0, 2, 2)), "probabilities", "shape"),
        ([[0.5, 0.5]], "probabilities", "shape"),
        ([[[0.5, 0.5]]], "softmax", "output"),
    ],
)
def test_bad_samples(samples, output, message):
    with pytest.raises(ValueError, match=message):
        ClassificationPrediction.from_samples(samples, output=output)


@pytest.mark.jax
def test_probabilities_output_of_a_logit_model_is_rejected():
    model = keras.Sequential([keras.Input((2,)), DenseFlipout(3, kl_weight=0.0, seed=0)])
    x = np.full((2, 2), 5.0, "float32")
    with pytest.raises(ValueError, match="do not sum to 1|leave"):
        tfp_bnn.predict.classification(model, x, num_samples=2, output="probabilities")
    with pytest.raises(ValueError, match="num_samples"):
        tfp_bnn.predict.classification(model, x, num_samples=0)


@pytest.mark.jax
def test_label_shape_mismatch_is_rejected():
    pred = ClassificationPrediction.from_samples([[[0.9, 0.1], [0.3, 0.7]]])
    with pytest.raises(ValueError):
        pred.nll([0, 1, 1])

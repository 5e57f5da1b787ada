"""class_log_probabilities: the [rows, K] class log-probabilities of a classifier head."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.distributions.classes import class_log_probabilities

tfd = tfp.distributions

LOGITS = np.array([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0]], np.float64)


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("family", [tfd.Categorical, tfd.OneHotCategorical])
def test_categorical_heads_give_the_log_softmax_of_their_logits(family):
    log_probs = class_log_probabilities(family(logits=LOGITS), dtype=tf.float64)
    assert log_probs.dtype == tf.float64
    np.testing.assert_allclose(log_probs.numpy(), _log_softmax(LOGITS), rtol=1e-12)


def test_probs_parameterized_heads_are_read_through_their_logits():
    probs = np.array([[0.7, 0.2, 0.1]], np.float32)
    log_probs = class_log_probabilities(tfd.Categorical(probs=probs))
    assert log_probs.dtype == tf.float32
    np.testing.assert_allclose(log_probs.numpy(), np.log(probs), rtol=1e-5)


@pytest.mark.parametrize("wrap", [False, True], ids=["bernoulli", "independent"])
def test_a_single_bernoulli_is_the_two_classes_zero_and_one(wrap):
    logits = np.array([[1.5], [-0.25], [0.0]], np.float32)
    head = tfd.Bernoulli(logits=logits)
    if wrap:
        head = tfd.Independent(head, reinterpreted_batch_ndims=1)
    log_probs = class_log_probabilities(head).numpy()
    assert log_probs.shape == (3, 2)
    p1 = 1.0 / (1.0 + np.exp(-logits[:, 0]))
    np.testing.assert_allclose(np.exp(log_probs), np.stack([1.0 - p1, p1], -1), rtol=1e-6)


@pytest.mark.parametrize("head", [
    tfd.Normal(np.zeros((2, 1), np.float32), 1.0),
    tfd.Independent(tfd.Bernoulli(logits=np.zeros((2, 3), np.float32)), 1),
], ids=["normal", "three_bernoullis"])
def test_other_heads_are_refused_naming_the_family(head):
    with pytest.raises(ValueError, match=f"got {type(head).__name__}"):
        class_log_probabilities(head)

"""NegativeLogLikelihood: -log p(y) of the carried distribution, targets aligned as Keras does."""

import keras
import numpy as np
import pytest
import tensorflow_probability as tfp

from tfp_bnn import layers
from tfp_bnn.losses import NegativeLogLikelihood
from tfp_bnn.losses import negative_log_likelihood

tfd = tfp.distributions


@pytest.mark.parametrize("y_shape", [(4,), (4, 1)])
def test_targets_of_either_rank(y_shape):
    params = np.random.default_rng(0).normal(size=(4, 2)).astype("float32")
    y = np.arange(4, dtype="float32").reshape(y_shape)
    value = layers.IndependentNormal(1)(params)
    ref = tfd.Normal(params[:, :1], np.log1p(np.exp(params[:, 1:]))).log_prob(y.reshape(4, 1))
    np.testing.assert_allclose(negative_log_likelihood(y, value), -ref[:, 0], rtol=1e-6)
    assert float(NegativeLogLikelihood()(y, value)) == pytest.approx(-float(np.mean(ref)),
                                                                     rel=1e-6)


def test_integer_labels_for_a_categorical():
    logits = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    value = layers.Categorical(4)(logits)
    labels = np.array([3, 0, 2])
    expected = -tfd.Categorical(logits=logits).log_prob(labels)
    np.testing.assert_allclose(negative_log_likelihood(labels, value), expected, rtol=1e-6)


def test_config_round_trip():
    loss = NegativeLogLikelihood(reduction="sum", name="nll")
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, NegativeLogLikelihood)
    assert restored.reduction == "sum" and restored.name == "nll"

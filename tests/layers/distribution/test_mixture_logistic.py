"""MixtureLogistic: a mixture of logistic distributions as output; parity with tfp.layers."""

import keras
import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("MixtureLogistic", (2, 1), "real")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")  # 2 x (1 + 2)
    y = np.random.default_rng(2).normal(size=(4, 1)).astype("float32")
    components = params[:, 2:].reshape(4, 2, 2)   # per component: location, scale
    expected = tfd.MixtureSameFamily(
        tfd.Categorical(logits=params[:, :2]),
        tfd.Independent(tfd.Logistic(components[..., :1],
                                     keras.ops.softplus(components[..., 1:])), 1))
    check_log_prob_by_hand(layers.MixtureLogistic(2, 1), (2, 1), params, expected, y)

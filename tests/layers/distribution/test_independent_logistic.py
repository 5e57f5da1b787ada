"""IndependentLogistic: an output layer with independent logistic events: parity with tfp.layers."""

import keras
import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("IndependentLogistic", (4,), "real")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 4)).astype("float32")
    y = np.random.default_rng(2).normal(size=(4, 2)).astype("float32")
    expected = tfd.Independent(
        tfd.Logistic(params[:, :2], keras.ops.softplus(params[:, 2:])), 1)
    check_log_prob_by_hand(layers.IndependentLogistic(2), (2,), params, expected, y)

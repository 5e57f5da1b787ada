"""OneHotCategorical: a one-hot categorical output layer: parity with tfp.layers."""

import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("OneHotCategorical", (5,), "one_hot")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    logits = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 2, 1, 2]]
    expected = tfd.OneHotCategorical(logits=logits, dtype=logits.dtype)
    check_log_prob_by_hand(layers.OneHotCategorical(3), (3,), logits, expected, y)

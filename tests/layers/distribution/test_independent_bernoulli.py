"""IndependentBernoulli: independent Bernoulli events as output; parity with tfp.layers."""

import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("IndependentBernoulli", (3,), "bernoulli")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    logits = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    y = np.random.default_rng(2).integers(0, 2, (4, 3)).astype("float32")
    expected = tfd.Independent(tfd.Bernoulli(logits=logits, dtype=logits.dtype), 1)
    check_log_prob_by_hand(layers.IndependentBernoulli(3), (3,), logits, expected, y)

"""IndependentPoisson: an output layer with independent Poisson counts: parity with tfp.layers."""

import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("IndependentPoisson", (3,), "poisson")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    log_rates = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    y = np.random.default_rng(2).integers(0, 5, (4, 3)).astype("float32")
    expected = tfd.Independent(tfd.Poisson(log_rate=log_rates), 1)
    check_log_prob_by_hand(layers.IndependentPoisson(3), (3,), log_rates, expected, y)

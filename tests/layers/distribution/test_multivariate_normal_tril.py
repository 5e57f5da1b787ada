"""MultivariateNormalTriL: a full-covariance Gaussian output layer: parity with tfp.layers."""

import numpy as np
import pytest

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tfp_bnn import layers
from tfp_bnn._substrate import tfb
from tfp_bnn._substrate import tfd


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("MultivariateNormalTriL", (3,), "real")


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 5)).astype("float32")
    y = np.random.default_rng(2).normal(size=(4, 2)).astype("float32")
    scale_tril = tfb.FillScaleTriL(diag_shift=np.float32(1e-5))(params[:, 2:])
    expected = tfd.MultivariateNormalTriL(loc=params[:, :2], scale_tril=scale_tril)
    check_log_prob_by_hand(layers.MultivariateNormalTriL(2), (2,), params, expected, y)

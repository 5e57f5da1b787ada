"""The tensor that carries a distribution, through what Keras does before a loss."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn import layers
from tfp_bnn.distributions import FORWARDED_METHODS
from tfp_bnn.distributions import carries_distribution
from tfp_bnn.distributions import distribution_of

tfd = tfp.distributions


def test_forwarded_methods_shadow_nothing_of_a_tensor():
    tensor = tf.constant([1.0])
    assert not [name for name in FORWARDED_METHODS if hasattr(tensor, name)]


def test_found_through_casts_and_reshapes_in_a_graph():
    layer = layers.IndependentNormal(1, convert_to_tensor_fn="mean")

    @tf.function
    def through(params):
        value = layer(params)
        cast = tf.cast(value, tf.float64)  # a float64 loss
        squeezed = tf.squeeze(cast, -1)    # rank alignment
        found = distribution_of(squeezed)
        return found.log_prob(tf.zeros([3, 1])), carries_distribution(value * 2.0)

    log_p, after_arithmetic = through(tf.zeros([3, 2]))
    np.testing.assert_allclose(
        log_p, tfd.Normal(0.0, tf.nn.softplus(0.0)).log_prob(0.0) * np.ones(3), rtol=1e-6)
    assert not after_arithmetic


def test_eager_tensor_without_distribution_is_refused():
    assert not carries_distribution(np.zeros(3))
    with pytest.raises(ValueError, match="carries no distribution.*ndarray"):
        distribution_of(np.zeros(3))

"""Categorical: integer labels as output, scored as `tfd.Categorical` scores them."""

import numpy as np
import tensorflow_probability as tfp

from tfp_bnn import layers

tfd = tfp.distributions


def test_categorical_matches_tfd_categorical_on_integer_labels():
    logits = np.random.default_rng(1).normal(size=(5, 4)).astype("float32")
    labels = np.array([0, 3, 1, 2, 3])
    value = layers.Categorical(4, convert_to_tensor_fn="mode")(logits)
    np.testing.assert_array_equal(value, np.argmax(logits, -1))
    np.testing.assert_allclose(value.log_prob(labels),
                               tfd.Categorical(logits=logits).log_prob(labels), rtol=1e-6)
    assert layers.Categorical.params_size(4) == 4

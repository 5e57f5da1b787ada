"""Categorical: integer labels as output, scored as `tfd.Categorical` scores them."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import fit_eagerly_and_reload
from tfp_bnn import layers
from tfp_bnn._substrate import tfd
from tfp_bnn.distributions import distribution_of
from tfp_bnn.distributions import value_of


def test_categorical_matches_tfd_categorical_on_integer_labels():
    logits = np.random.default_rng(1).normal(size=(5, 4)).astype("float32")
    labels = np.array([0, 3, 1, 2, 3])
    output = layers.Categorical(4, convert_to_tensor_fn="mode")(logits)
    np.testing.assert_array_equal(value_of(output), np.argmax(logits, -1))
    check_log_prob_by_hand(layers.Categorical(4), (4,), logits, tfd.Categorical(logits=logits),
                           labels)
    assert layers.Categorical.params_size(4) == 4


@pytest.mark.jax
def test_a_classifier_fits_returns_its_distribution_and_reloads(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2)).astype("float32")
    labels = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(layers.Categorical.params_size(3)),
                              layers.Categorical(3, seed=4)])
    model.compile(keras.optimizers.Adam(0.05), loss=tfp_bnn.losses.negative_log_likelihood)
    losses, yhat, reloaded = fit_eagerly_and_reload(model, x, labels, tmp_path)
    assert losses[-1] < losses[0]
    expected = tfd.Categorical(logits=keras.ops.convert_to_numpy(model.layers[0](x)))
    for output in (yhat, reloaded):
        distribution = distribution_of(output)
        np.testing.assert_allclose(distribution.probs_parameter(), expected.probs_parameter(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(output.log_prob(labels), expected.log_prob(labels),
                                   rtol=1e-5, atol=1e-5)

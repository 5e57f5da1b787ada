"""MixtureSameFamily: a mixture of any distribution layer; parity with tfp.layers."""

import pytest

tf_keras = pytest.importorskip("tf_keras")  # first: TFP's layers are built on it

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from tests.layers.distribution.distribution_heads import check_log_prob_by_hand  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn._substrate import tfd as tfd_substrate  # noqa: E402

tfpl = tfp.layers


def test_mixture_same_family_matches_tfp():
    ours = layers.MixtureSameFamily(2, layers.IndependentPoisson(3), convert_to_tensor_fn="mean")
    size = layers.MixtureSameFamily.params_size(2, layers.IndependentPoisson.params_size(3))
    assert size == tfpl.MixtureSameFamily.params_size(2, tfpl.IndependentPoisson.params_size(3))
    params = np.random.default_rng(3).normal(size=(4, size)).astype("float32")
    ref = tfpl.MixtureSameFamily.new(tf.constant(params), 2, tfpl.IndependentPoisson(3))
    y = np.random.default_rng(4).integers(0, 5, (4, 3)).astype("float32")
    value = ours(params)
    np.testing.assert_allclose(value.log_prob(y), ref.log_prob(y), rtol=1e-5)
    np.testing.assert_allclose(value, ref.mean(), rtol=1e-5)
    restored = layers.MixtureSameFamily.from_config(ours.get_config())
    np.testing.assert_allclose(restored(params), value, rtol=1e-6)


def test_new_takes_a_component_layer_as_tfp_does():
    params = np.random.default_rng(5).normal(size=(4, 6)).astype("float32")
    ours = layers.MixtureSameFamily.new(params, 2, layers.IndependentPoisson(2))
    ref = tfpl.MixtureSameFamily.new(tf.constant(params), 2, tfpl.IndependentPoisson(2))
    y = np.random.default_rng(6).integers(0, 5, (4, 2)).astype("float32")
    assert isinstance(ours, tfp.distributions.MixtureSameFamily)
    np.testing.assert_allclose(ours.log_prob(y), ref.log_prob(y), rtol=1e-5)
    np.testing.assert_allclose(ours.mean(), ref.mean(), rtol=1e-5)


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")  # 2 x (1 + 2)
    y = np.random.default_rng(2).integers(0, 5, (4, 2)).astype("float32")
    expected = tfd_substrate.MixtureSameFamily(
        tfd_substrate.Categorical(logits=params[:, :2]),
        tfd_substrate.Independent(tfd_substrate.Poisson(log_rate=params[:, 2:].reshape(4, 2, 2)),
                                  1))
    layer = layers.MixtureSameFamily(2, layers.IndependentPoisson(2))
    check_log_prob_by_hand(layer, (2, layers.IndependentPoisson.params_size(2)), params,
                           expected, y)

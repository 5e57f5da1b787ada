"""TFP's inspection idiom tfd.kl_divergence(layer.kernel_posterior, layer.kernel_prior)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn import layers

tfd = tfp.distributions

# (layer, how to build it); every family with its default prior and posterior.
FAMILIES = {
    "DenseFlipout": (lambda: layers.DenseFlipout(3), (2, 4)),
    "DenseReparameterization": (lambda: layers.DenseReparameterization(3), (2, 4)),
    "DenseLocalReparameterization": (lambda: layers.DenseLocalReparameterization(3), (2, 4)),
    # TFP's DenseVariational defaults to the Monte Carlo KL; the closed form is
    # the one an exact comparison can hold it to.
    "DenseVariational": (lambda: layers.DenseVariational(3, kl_use_exact=True), (2, 4)),
    "Conv1DFlipout": (lambda: layers.Conv1DFlipout(2, 3), (2, 6, 2)),
    "Conv1DReparameterization": (lambda: layers.Conv1DReparameterization(2, 3), (2, 6, 2)),
    "Conv2DFlipout": (lambda: layers.Conv2DFlipout(2, 3), (2, 5, 5, 2)),
    "Conv2DReparameterization": (lambda: layers.Conv2DReparameterization(2, 3), (2, 5, 5, 2)),
    "Conv3DFlipout": (lambda: layers.Conv3DFlipout(2, 2), (1, 3, 3, 3, 2)),
    "Conv3DReparameterization": (lambda: layers.Conv3DReparameterization(2, 2),
                                 (1, 3, 3, 3, 2)),
    "EmbeddingReparameterization": (lambda: layers.EmbeddingReparameterization(5, 3), "ids"),
    "LSTMCellFlipout": (lambda: layers.LSTMCellFlipout(3), "rnn"),
    "LSTMCellReparameterization": (lambda: layers.LSTMCellReparameterization(3), "rnn"),
    "GRUCellFlipout": (lambda: layers.GRUCellFlipout(3), "rnn"),
    "GRUCellReparameterization": (lambda: layers.GRUCellReparameterization(3), "rnn"),
}


def _built(name):
    make, inputs = FAMILIES[name]
    layer = make()
    if inputs == "ids":
        layer(np.array([[1, 2, 4]]))
    elif inputs == "rnn":
        keras.layers.RNN(layer)(np.ones((2, 3, 4), "float32"))
    else:
        layer(np.ones(inputs, "float32"))
    return layer


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_kl_of_exposed_posterior_and_prior_is_the_layers_own(name):
    layer = _built(name)
    kl = tfd.kl_divergence(layer.kernel_posterior, layer.kernel_prior)
    if hasattr(layer, "recurrent_kernel_posterior"):
        kl += tfd.kl_divergence(layer.recurrent_kernel_posterior, layer.recurrent_kernel_prior)
    np.testing.assert_allclose(kl, layer.kl_divergence(), rtol=1e-5)


def test_bayesian_bias_pair_adds_up_to_the_layers_kl():
    layer = layers.DenseReparameterization(3, bayesian_bias=True)
    layer(np.ones((2, 4), "float32"))
    kl = (tfd.kl_divergence(layer.kernel_posterior, layer.kernel_prior)
          + tfd.kl_divergence(layer.bias_posterior, layer.bias_prior))
    np.testing.assert_allclose(kl, layer.kl_divergence(), rtol=1e-5)


def _posterior():
    loc = tf.constant(np.linspace(-1.0, 1.0, 6).reshape(3, 2), tf.float32)
    return tfd.Independent(tfd.Normal(loc, 0.5 + tf.abs(loc)), reinterpreted_batch_ndims=2)


def test_equals_tfps_default_prior_form_both_ways():
    # TFP's default_multivariate_normal_fn: N(0, 1) broadcast to the kernel shape.
    q = _posterior()
    sampled = tfd.Sample(tfd.Normal(0.0, 2.0), sample_shape=(3, 2))
    broadcast = tfd.Independent(tfd.Normal(tf.zeros([3, 2]), 2.0), reinterpreted_batch_ndims=2)
    np.testing.assert_allclose(tfd.kl_divergence(q, sampled), tfd.kl_divergence(q, broadcast),
                               rtol=1e-6)
    np.testing.assert_allclose(tfd.kl_divergence(sampled, q), tfd.kl_divergence(broadcast, q),
                               rtol=1e-6)


def test_a_batch_of_elements_lines_up_with_the_batch_of_the_independent():
    q = tfd.Independent(tfd.Normal(tf.zeros([2, 3]), 1.0), reinterpreted_batch_ndims=1)
    p = tfd.Sample(tfd.Normal([0.0, 1.0], 1.0), sample_shape=3)   # batch [2], event [3]
    np.testing.assert_allclose(tfd.kl_divergence(q, p), [0.0, 1.5], atol=1e-6)


def test_pairs_that_do_not_line_up_are_not_implemented():
    q = tfd.Independent(tfd.Normal(tf.zeros([3, 2]), 1.0), reinterpreted_batch_ndims=2)
    with pytest.raises(NotImplementedError, match="same event shape"):
        tfd.kl_divergence(q, tfd.Sample(tfd.Normal(0.0, 1.0), sample_shape=(2, 3)))
    mvn = tfd.Independent(tfd.MultivariateNormalDiag(tf.zeros([3, 2])),
                          reinterpreted_batch_ndims=1)
    with pytest.raises(NotImplementedError, match="same event shape"):
        tfd.kl_divergence(mvn, tfd.Sample(tfd.Normal(0.0, 1.0), sample_shape=(3, 2)))

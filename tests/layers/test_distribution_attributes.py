"""`layer.kernel_posterior` and friends are `tfd.Distribution` attributes, as in TFP."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization

tfd = tfp.distributions


def test_unbuilt_layer_has_no_distributions():
    layer = DenseFlipout(3)
    assert layer.kernel_posterior is None and layer.kernel_prior is None
    assert layer.bias_posterior is None and layer.bias_prior is None


@pytest.mark.parametrize("make, kernel_shape", [
    (lambda: DenseReparameterization(3, seed=0), (4, 3)),
    (lambda: Conv2DFlipout(3, 2, seed=0), (2, 2, 4, 3)),
], ids=["dense", "conv2d"])
def test_kernel_distributions_are_attributes_over_the_kernel(make, kernel_shape):
    layer = make()
    layer.build((None, 5, 5, 4) if len(kernel_shape) == 4 else (None, 4))
    q, p = layer.kernel_posterior, layer.kernel_prior
    assert isinstance(q, tfd.Distribution) and isinstance(p, tfd.Distribution)
    assert tuple(q.event_shape) == tuple(p.event_shape) == kernel_shape
    # TFP's layout: Independent(Normal), so `.distribution.loc/.scale` work.
    loc, rho = layer.kernel_params
    np.testing.assert_array_equal(q.distribution.loc.numpy(), loc.numpy())
    np.testing.assert_allclose(q.distribution.scale.numpy(),
                               np.broadcast_to(tf.nn.softplus(rho).numpy(), kernel_shape),
                               rtol=1e-6)
    w = q.sample(seed=(1, 2))
    assert np.isfinite(float(q.log_prob(w) - p.log_prob(w)))
    # A fresh distribution per read: it follows the variables.
    loc.assign(loc + 1.0)
    np.testing.assert_array_equal(layer.kernel_posterior.mean().numpy(), loc.numpy())


def test_bias_distributions_follow_the_bias_arguments():
    deterministic = DenseFlipout(3, bias_initializer="ones")
    deterministic.build((None, 2))
    q = deterministic.bias_posterior
    # TFP's default bias posterior: a point mass (is_singular=True) without prior.
    assert isinstance(q.distribution, tfd.Deterministic)
    np.testing.assert_array_equal(q.mean().numpy(), np.ones(3))
    assert deterministic.bias_prior is None

    bayesian = DenseFlipout(3, bayesian_bias=True)
    bayesian.build((None, 2))
    assert isinstance(bayesian.bias_posterior.distribution, tfd.Normal)
    assert tuple(bayesian.bias_prior.event_shape) == (3,)

    no_bias = DenseFlipout(3, use_bias=False)
    no_bias.build((None, 2))
    assert no_bias.bias_posterior is None and no_bias.bias_prior is None

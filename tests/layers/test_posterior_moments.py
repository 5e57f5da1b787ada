"""BayesianLayer.posterior_moments: the means and variances moment propagation reads."""

import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn import layers


def _built(layer, width=4):
    layer(np.ones((2, width), "float32"))
    return layer


@pytest.mark.parametrize("cls", [layers.DenseReparameterization, layers.DenseFlipout])
def test_moments_are_loc_and_softplus_rho_squared(cls):
    layer = _built(cls(3, bayesian_bias=True, seed=0))
    kernel_loc, kernel_var, bias_loc, bias_var = layer.posterior_moments()
    loc, rho = layer.kernel_params
    np.testing.assert_allclose(kernel_loc, loc.numpy())
    np.testing.assert_allclose(kernel_var, tf.nn.softplus(rho).numpy() ** 2, rtol=1e-6)
    bias_rho = layer.bias_params[1]
    np.testing.assert_allclose(bias_var, tf.nn.softplus(bias_rho).numpy() ** 2, rtol=1e-6)
    assert bias_loc.shape == (3,)
    # The variances are the posterior's: compare with the distribution itself.
    np.testing.assert_allclose(kernel_var, layer.kernel_posterior.variance().numpy(),
                               rtol=1e-5)


def test_deterministic_bias_has_zero_variance_and_no_bias_gives_none():
    _, _, bias_loc, bias_var = _built(layers.DenseFlipout(3, seed=0)).posterior_moments()
    assert bias_loc.shape == (3,) and not np.any(bias_var.numpy())
    moments = _built(layers.DenseFlipout(3, use_bias=False, seed=0)).posterior_moments()
    assert moments[2] is None and moments[3] is None


def test_mean_mode_zeroes_the_variances():
    layer = _built(layers.DenseReparameterization(3, bayesian_bias=True, seed=0))
    assert np.all(layer.posterior_moments()[1].numpy() > 0)
    tfp_bnn.set_mean_mode(layer, True)
    _, kernel_var, _, bias_var = layer.posterior_moments()
    assert not np.any(kernel_var.numpy()) and not np.any(bias_var.numpy())


def test_flow_posterior_is_refused():
    layer = _built(layers.DenseReparameterization(3, posterior=tfp_bnn.posteriors.FlowPosterior(),
                                                  seed=0))
    with pytest.raises(ValueError, match="location-scale posterior"):
        layer.posterior_moments()


def test_kl_penalty_is_the_weighted_kl_and_is_logged_like_a_call():
    layer = _built(layers.DenseReparameterization(3, kl_weight=0.25, seed=0))
    layer.kl_tracker.reset_state()
    penalty = float(layer.kl_penalty(8))
    assert penalty == pytest.approx(0.25 * float(layer.kl_divergence()), rel=1e-6)
    assert float(layer.kl_tracker.result()) == pytest.approx(penalty, rel=1e-6)

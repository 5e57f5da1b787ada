"""BayesianLayer, the base of the variational layers: its distributions and moments.

`layer.kernel_posterior` and friends are `tfd.Distribution` attributes, as in
TFP; `posterior_moments` gives the means and variances moment propagation reads.
"""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import layers
from tfp_bnn import priors
from tfp_bnn._substrate import tfd
from tfp_bnn._substrate import tfp

# Tests marked `jax` run on both backends; the others use layers or posteriors
# that run on TensorFlow only so far (convolutions, flows).


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _softplus(x):
    return np.logaddexp(0.0, _np(x))


@pytest.mark.jax
def test_unbuilt_layer_has_no_distributions():
    layer = layers.DenseFlipout(3)
    assert layer.kernel_posterior is None and layer.kernel_prior is None
    assert layer.bias_posterior is None and layer.bias_prior is None


@pytest.mark.parametrize("make, kernel_shape", [
    pytest.param(lambda: layers.DenseReparameterization(3, seed=0), (4, 3),
                 marks=pytest.mark.jax),
    (lambda: layers.Conv2DFlipout(3, 2, seed=0), (2, 2, 4, 3)),
], ids=["dense", "conv2d"])
def test_kernel_distributions_are_attributes_over_the_kernel(make, kernel_shape):
    layer = make()
    layer.build((None, 5, 5, 4) if len(kernel_shape) == 4 else (None, 4))
    q, p = layer.kernel_posterior, layer.kernel_prior
    assert isinstance(q, tfd.Distribution) and isinstance(p, tfd.Distribution)
    assert tuple(q.event_shape) == tuple(p.event_shape) == kernel_shape
    # TFP's layout: Independent(Normal), so `.distribution.loc/.scale` work.
    loc, rho = layer.kernel_params
    np.testing.assert_array_equal(_np(q.distribution.loc), _np(loc))
    np.testing.assert_allclose(_np(q.distribution.scale),
                               np.broadcast_to(_softplus(rho), kernel_shape),
                               rtol=1e-6)
    # A stateless seed pair (JAX's keys are uint32, TensorFlow's seeds int32).
    seed = np.array([1, 2], "uint32" if keras.backend.backend() == "jax" else "int32")
    w = q.sample(seed=tfp.random.sanitize_seed(seed))
    assert np.isfinite(float(q.log_prob(w) - p.log_prob(w)))
    # A fresh distribution per read: it follows the variables.
    loc.assign(loc + 1.0)
    np.testing.assert_array_equal(_np(layer.kernel_posterior.mean()), _np(loc))


@pytest.mark.jax
def test_bias_distributions_follow_the_bias_arguments():
    deterministic = layers.DenseFlipout(3, bias_initializer="ones")
    deterministic.build((None, 2))
    q = deterministic.bias_posterior
    # TFP's default bias posterior: a point mass (is_singular=True) without prior.
    assert isinstance(q.distribution, tfd.Deterministic)
    np.testing.assert_array_equal(_np(q.mean()), np.ones(3))
    assert deterministic.bias_prior is None

    bayesian = layers.DenseFlipout(3, bayesian_bias=True)
    bayesian.build((None, 2))
    assert isinstance(bayesian.bias_posterior.distribution, tfd.Normal)
    assert tuple(bayesian.bias_prior.event_shape) == (3,)

    no_bias = layers.DenseFlipout(3, use_bias=False)
    no_bias.build((None, 2))
    assert no_bias.bias_posterior is None and no_bias.bias_prior is None


def _built(layer, width=4):
    layer(np.ones((2, width), "float32"))
    return layer


@pytest.mark.jax
@pytest.mark.parametrize("cls", [layers.DenseReparameterization, layers.DenseFlipout])
def test_moments_are_loc_and_softplus_rho_squared(cls):
    layer = _built(cls(3, bayesian_bias=True, seed=0))
    kernel_loc, kernel_var, bias_loc, bias_var = layer.posterior_moments()
    loc, rho = layer.kernel_params
    np.testing.assert_allclose(kernel_loc, _np(loc))
    np.testing.assert_allclose(kernel_var, _softplus(rho) ** 2, rtol=1e-6)
    bias_rho = layer.bias_params[1]
    np.testing.assert_allclose(bias_var, _softplus(bias_rho) ** 2, rtol=1e-6)
    assert bias_loc.shape == (3,)
    # The variances are the posterior's: compare with the distribution itself.
    np.testing.assert_allclose(kernel_var, _np(layer.kernel_posterior.variance()),
                               rtol=1e-5)


@pytest.mark.jax
def test_deterministic_bias_has_zero_variance_and_no_bias_gives_none():
    _, _, bias_loc, bias_var = _built(layers.DenseFlipout(3, seed=0)).posterior_moments()
    assert bias_loc.shape == (3,) and not np.any(_np(bias_var))
    moments = _built(layers.DenseFlipout(3, use_bias=False, seed=0)).posterior_moments()
    assert moments[2] is None and moments[3] is None


@pytest.mark.jax
def test_mean_mode_zeroes_the_variances():
    layer = _built(layers.DenseReparameterization(3, bayesian_bias=True, seed=0))
    assert np.all(_np(layer.posterior_moments()[1]) > 0)
    tfp_bnn.set_mean_mode(layer, True)
    _, kernel_var, _, bias_var = layer.posterior_moments()
    assert not np.any(_np(kernel_var)) and not np.any(_np(bias_var))


def test_flow_posterior_is_refused():
    layer = _built(layers.DenseReparameterization(3, posterior=tfp_bnn.posteriors.FlowPosterior(),
                                                  seed=0))
    with pytest.raises(ValueError, match="location-scale posterior"):
        layer.posterior_moments()


@pytest.mark.jax
def test_mixture_prior_arguments_are_checked_through_the_layer():
    with pytest.raises(ValueError, match=r"`sigma1` must be larger than `sigma2`"):
        layers.DenseFlipout(2, prior=priors.ScaleMixturePrior(0.5, 0.1, 1.0))
    with pytest.raises(ValueError, match=r"`pi`.*1.5"):
        layers.DenseFlipout(2, prior=priors.ScaleMixturePrior(1.5, 1.0, 0.1))
    with pytest.raises(ValueError, match=r"`scale`.*0.0"):
        layers.DenseFlipout(2, prior=priors.NormalPrior(0.0, 0.0))

"""FullCovarianceNormal: parameterization, densities, serialization, who takes it."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

tfd = tfp.distributions


def _layer(**kwargs):
    layer = DenseReparameterization(3, posterior=posteriors.FullCovarianceNormal(), seed=0,
                                    kl_weight=1.0, **kwargs)
    layer.build((None, 4))
    return layer


def test_initialisation_is_close_to_a_point_mass():
    layer = _layer()
    loc, rho, tril = layer.kernel_params
    assert loc.shape == rho.shape == (4, 3)
    assert tril.shape == (12 * 11 // 2,)
    np.testing.assert_array_equal(tril.numpy(), 0.0)
    scale_tril = layer.posterior.prepare(layer.kernel_params).scale_tril.numpy()
    assert np.all(np.abs(scale_tril) < 0.07)


def test_distribution_has_the_weight_shape_and_the_draws_log_q():
    layer = _layer()
    rng = np.random.default_rng(1)
    loc, rho, tril = layer.kernel_params
    rho.assign(rng.normal(-1.0, 0.2, rho.shape).astype("float32"))
    tril.assign(rng.normal(0.0, 0.3, tril.shape).astype("float32"))
    q = layer.kernel_posterior
    assert tuple(q.event_shape) == (4, 3)
    seed = tf.constant([3, 4], tf.int32)
    draw = layer.posterior.draw(layer.kernel_params, seed, "float32")
    sample = loc + draw.perturbation
    # log q from eps (the draw) equals the MVN's log_prob of the sample.
    np.testing.assert_allclose(float(draw.log_prob), float(q.log_prob(sample)), rtol=1e-5)
    samples = layer.posterior.sample_n(draw.prepared, 5, seed, "float32", 1.0)
    assert samples.shape == (5, 4, 3)


def test_analytic_kl_of_a_reparameterization_layer_with_a_bayesian_bias():
    layer = _layer(bayesian_bias=True, prior=priors.NormalPrior(0.1, 0.5))
    rng = np.random.default_rng(2)
    for params in (layer.kernel_params, layer.bias_params):
        params[0].assign(rng.normal(0, 0.5, params[0].shape).astype("float32"))
        params[2].assign(rng.normal(0, 0.3, params[2].shape).astype("float32"))
    p = tfd.Normal(np.float64(0.1), np.float64(0.5))
    expected = 0.0
    for params in (layer.kernel_params, layer.bias_params):
        prepared = layer.posterior.prepare(params)
        loc = prepared.loc.numpy().astype(np.float64).ravel()
        q = tfd.MultivariateNormalTriL(loc, prepared.scale_tril.numpy().astype(np.float64))
        prior = tfd.MultivariateNormalDiag(np.full(loc.shape, p.loc), np.full(loc.shape, p.scale))
        expected += float(tfd.kl_divergence(q, prior))
    np.testing.assert_allclose(float(layer.kl_divergence()), expected, rtol=1e-5)


def test_kl_to_a_non_normal_prior_is_monte_carlo_only():
    layer = _layer(prior=priors.ScaleMixturePrior())
    assert np.isfinite(float(layer.kl_divergence()))  # "auto" picks Monte Carlo
    prepared = layer.posterior.prepare(layer.kernel_params)
    with pytest.raises(NotImplementedError, match="Normal priors only"):
        layer.posterior.kl(prepared, layer.prior)


@pytest.mark.parametrize("cls", [DenseFlipout, DenseLocalReparameterization])
def test_estimators_that_need_location_scale_refuse_it(cls):
    with pytest.raises(ValueError, match="location-scale posterior"):
        cls(2, posterior="full_covariance_normal")


def test_serialization_round_trip_and_registry():
    post = posteriors.FullCovarianceNormal(rho_init=-4.0, rho_init_stddev=0.0, scale_offset=1e-5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(post))
    assert restored == post and restored is not post
    assert posteriors.get("full_covariance_normal") == posteriors.FullCovarianceNormal()


@pytest.mark.parametrize("kwargs, argument", [
    ({"rho_init": float("nan")}, "rho_init"),
    ({"rho_init_stddev": -1.0}, "rho_init_stddev"),
    ({"scale_offset": -1e-3}, "scale_offset"),
])
def test_invalid_arguments_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        posteriors.FullCovarianceNormal(**kwargs)


class _JointLogProbOnly(posteriors.FullCovarianceNormal):
    """Leaves log q to the layer, which then takes it from the joint `distribution`."""

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        return super().draw(params, seed, dtype, prior, with_noise)._replace(log_prob=None)


def test_monte_carlo_kl_with_a_joint_distribution_sums_log_q_once():
    rng = np.random.default_rng(5)
    kls = []
    for posterior in (posteriors.FullCovarianceNormal(), _JointLogProbOnly()):
        layer = DenseReparameterization(2, posterior=posterior, prior=priors.ScaleMixturePrior(),
                                        kl_weight=1.0, seed=3)
        layer.build((None, 3))
        if not kls:
            values = [rng.normal(0, 0.5, v.shape).astype("float32") for v in layer.kernel_params]
        for var, value in zip(layer.kernel_params, values):
            var.assign(value)
        kls.append(float(layer.kl_divergence()))  # same seed: the same sample
    np.testing.assert_allclose(kls[1], kls[0], rtol=1e-4)

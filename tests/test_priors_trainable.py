"""TrainableNormalPrior: variables on the layer, closed-form KL, serialization."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import priors
from tfp_bnn.layers import DenseReparameterization


def _softplus(x):
    return np.logaddexp(0.0, x)


def _layer(prior, **kwargs):
    layer = DenseReparameterization(3, prior=prior, kl_weight=1.0, seed=0, **kwargs)
    layer.build((None, 4))
    return layer


def _closed_form(loc, sigma, m0, s0):
    return float(np.sum(np.log(s0 / sigma) + (sigma**2 + (loc - m0) ** 2) / (2 * s0**2) - 0.5))


def _kernel_kl(layer, m0, s0):
    loc, rho = (v.numpy().astype(np.float64) for v in layer.kernel_params)
    return _closed_form(loc, _softplus(rho), m0, s0)


@pytest.mark.jax
@pytest.mark.parametrize("per_weight, shape", [(True, (4, 3)), (False, ())])
def test_variables_are_created_on_the_layer(per_weight, shape):
    layer = _layer(priors.TrainableNormalPrior(trainable_scale=True, per_weight=per_weight,
                                               scale=0.5),
                   bayesian_bias=True)
    by_name = {v.path.split("/")[-1]: v for v in layer.trainable_variables}
    assert by_name["kernel_prior_loc"].shape == shape
    assert by_name["kernel_prior_rho"].shape == shape
    assert by_name["bias_prior_loc"].shape == ((3,) if per_weight else ())
    np.testing.assert_allclose(_softplus(by_name["kernel_prior_rho"].numpy()), 0.5, rtol=1e-6)
    p = layer.kernel_prior
    assert tuple(p.event_shape) == (4, 3)


@pytest.mark.jax
def test_fixed_scale_adds_only_a_loc():
    layer = _layer(priors.TrainableNormalPrior())
    names = [v.path.split("/")[-1] for v in layer.trainable_variables]
    assert names == ["kernel_loc", "kernel_rho", "kernel_prior_loc", "bias"]


def test_two_layers_sharing_one_prior_object_keep_their_own_variables():
    """Each layer's KL uses its own prior variables, also inside one compiled step."""
    prior = priors.TrainableNormalPrior(trainable_scale=True)
    first, second = _layer(prior), _layer(prior)
    rng = np.random.default_rng(0)
    values = []
    for layer in (first, second):
        m0 = rng.normal(0, 0.5, (4, 3))
        s0 = rng.uniform(0.3, 2.0, (4, 3))
        layer._kernel_prior_built.variables[0].assign(m0.astype("float32"))
        layer._kernel_prior_built.variables[1].assign(
            np.log(np.expm1(s0)).astype("float32"))
        values.append((m0, s0))
    x = np.ones((2, 4), "float32")

    @tf.function
    def step():
        first(x, training=True)
        second(x, training=True)
        return first.losses[0], second.losses[0]

    for _ in range(2):
        kls = step()
        for layer, kl, (m0, s0) in zip((first, second), kls, values):
            np.testing.assert_allclose(float(kl), _kernel_kl(layer, m0, s0), rtol=1e-4)
    # Change one prior: the compiled step reads the new value.
    first._kernel_prior_built.variables[0].assign(np.zeros((4, 3), "float32"))
    kl, _ = step()
    np.testing.assert_allclose(float(kl), _kernel_kl(first, 0.0, values[0][1]), rtol=1e-4)


def test_kl_gradient_reaches_the_prior():
    layer = _layer(priors.TrainableNormalPrior(per_weight=False, trainable_scale=True))
    loc_var, rho_var = layer._kernel_prior_built.variables
    with tf.GradientTape() as tape:
        kl = layer.kl_divergence()
    grad_loc, grad_rho = tape.gradient(kl, [loc_var, rho_var])
    loc, rho = (v.numpy().astype(np.float64) for v in layer.kernel_params)
    sigma = _softplus(rho)
    # d/dm0 = sum (m0 - m) / s0^2; d/ds0 = sum (1/s0 - (sigma^2 + (m - m0)^2) / s0^3),
    # times ds0/drho = sigmoid(rho0) for the softplus scale (m0 = 0, s0 = 1 here).
    np.testing.assert_allclose(float(grad_loc), np.sum(-loc), rtol=1e-4)
    expected_rho = np.sum(1.0 - (sigma**2 + loc**2)) * (1 / (1 + np.exp(-rho_var.numpy())))
    np.testing.assert_allclose(float(grad_rho), expected_rho, rtol=1e-4)


@pytest.mark.jax
def test_unbuilt_prior_says_what_to_do():
    with pytest.raises(ValueError, match="build"):
        priors.TrainableNormalPrior().element_distribution()


@pytest.mark.jax
def test_serialization_round_trip_and_registry():
    prior = priors.TrainableNormalPrior(loc_initializer=keras.initializers.Constant(0.3),
                                        scale=2.0, trainable_scale=True, per_weight=False)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(prior))
    assert restored == prior and restored is not prior
    assert hash(restored) == hash(prior)
    assert priors.get("trainable_normal") == priors.TrainableNormalPrior()


@pytest.mark.parametrize("kwargs, argument", [
    ({"scale": 0.0}, "scale"),
    ({"trainable_scale": 1}, "trainable_scale"),
    ({"per_weight": "yes"}, "per_weight"),
    ({"loc_initializer": "no_such_initializer"}, "loc_initializer"),
])
@pytest.mark.jax
def test_invalid_arguments_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        priors.TrainableNormalPrior(**kwargs)

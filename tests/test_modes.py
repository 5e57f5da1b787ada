"""Mean mode: the switch, the context manager, and what training does with it."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

pytestmark = pytest.mark.jax


def _model():
    return keras.Sequential([
        keras.Input((4,)),
        DenseReparameterization(8, activation="tanh", seed=0, kl_weight=0.1),
        keras.Sequential([DenseLocalReparameterization(8, seed=1, kl_weight=0.1)]),  # nested
        DenseFlipout(2, seed=2, kl_weight=0.1, bayesian_bias=True),
    ])


def _mean_forward(model, x):
    """The network evaluated by hand at every posterior mean."""
    h = np.tanh(x @ model.layers[0].kernel_params[0].numpy() + model.layers[0].bias.numpy())
    inner = model.layers[1].layers[0]
    h = h @ inner.kernel_params[0].numpy() + inner.bias.numpy()
    last = model.layers[2]
    return h @ last.kernel_params[0].numpy() + last.bias_params[0].numpy()


def test_mean_mode_gives_the_posterior_mean_network():
    model = _model()
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    assert tfp_bnn.set_mean_mode(model) == 3  # nested layers are found
    assert tfp_bnn.is_mean_mode(model)
    np.testing.assert_allclose(model(x), _mean_forward(model, x), rtol=1e-5, atol=1e-6)
    tfp_bnn.set_mean_mode(model, False)
    assert not tfp_bnn.is_mean_mode(model)
    assert not np.allclose(model(x), _mean_forward(model, x), atol=1e-4)


def test_context_manager_restores_the_previous_state():
    model = _model()
    x = np.ones((2, 4), "float32")
    with tfp_bnn.mean_mode(model):
        a, b = model(x), model(x)
        np.testing.assert_array_equal(a, b)
    assert not tfp_bnn.is_mean_mode(model)


def test_switch_is_read_by_an_already_compiled_predict():
    model = _model()
    x = np.ones((3, 4), "float32")
    model.predict(x, verbose=0)  # trace while sampling
    tfp_bnn.set_mean_mode(model)
    np.testing.assert_allclose(model.predict(x, verbose=0), _mean_forward(model, x),
                               rtol=1e-5, atol=1e-6)

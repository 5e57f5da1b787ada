"""LaplaceDense: modes, regression outputs, saving, argument checks.

All marked `jax`: the layer computes in `keras.ops` on both backends."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.laplace import LaplaceDense

pytestmark = pytest.mark.jax

D, K = 3, 2


def head(likelihood="classification", structure="full", noise_variance=None):
    rng = np.random.default_rng(0)
    layer = LaplaceDense(K, structure=structure, likelihood=likelihood,
                         noise_variance=noise_variance, seed=1)
    inputs = keras.Input((D,))
    model = keras.Model(inputs, layer(inputs))
    loc = rng.normal(size=(D + 1, K))
    if structure == "full":
        factors = (np.tril(rng.normal(size=((D + 1) * K,) * 2)),)
    else:
        factors = (np.linalg.qr(rng.normal(size=(D + 1, D + 1)))[0],
                   np.linalg.qr(rng.normal(size=(K, K)))[0], rng.uniform(0.5, 1, (D + 1, K)))
    layer.set_posterior(loc, factors)
    return model, layer, loc


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(1).normal(size=(4, D)).astype("float32")


@pytest.mark.parametrize("structure", ["full", "kron"])
def test_mean_mode_and_training_use_theta_star_and_sampling_does_not(x, structure):
    model, layer, loc = head(structure=structure)
    expected = np.concatenate([x, np.ones((4, 1))], 1) @ loc
    np.testing.assert_allclose(model(x, training=True), expected, rtol=1e-5, atol=1e-5)
    sampled = np.asarray(model(x))
    assert np.abs(sampled - expected).max() > 1e-2
    assert tfp_bnn.set_mean_mode(model) == 1
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-5)


def test_regression_outputs_means_then_log_noise_variance(x):
    model, _, _ = head("regression", "kron", noise_variance=0.3)
    outputs = np.asarray(model(x))
    assert outputs.shape == (4, 2 * K)
    np.testing.assert_allclose(outputs[:, K:], np.log(0.3), rtol=1e-6)


def test_saves_and_loads_with_safe_mode(x, tmp_path):
    model, layer, _ = head("regression", noise_variance=0.5)
    tfp_bnn.set_mean_mode(model)
    path = str(tmp_path / "laplace.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6)
    restored = loaded.layers[-1]
    assert restored.get_config() == layer.get_config()
    np.testing.assert_array_equal(restored.factors[0], layer.factors[0])


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="`units` must be a positive int, got 0"):
        LaplaceDense(0)
    with pytest.raises(ValueError, match="`structure` must be one of"):
        LaplaceDense(2, structure="diag")
    with pytest.raises(ValueError, match="`noise_variance` must be"):
        LaplaceDense(2, likelihood="regression")
    with pytest.raises(ValueError, match="needs features \\[batch, D\\]"):
        LaplaceDense(2)(keras.Input((3, 4)))

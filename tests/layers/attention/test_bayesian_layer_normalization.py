"""BayesianLayerNormalization: the standard battery, Keras parity, sampled calls."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import priors
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.predict import MonteCarloRunner
from tfp_bnn.testing import run_bayesian_layer_test


def _softplus(x):
    return np.log1p(np.exp(x))


def _normalized(x, epsilon):
    x = x.astype("float64")
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon)


@pytest.mark.parametrize(
    "kwargs, input_shape",
    [
        ({}, (5, 3, 4)),
        ({"center": False}, (5, 4)),
        ({"bayesian_bias": False, "epsilon": 1e-5,
          "prior": priors.ScaleMixturePrior(0.5, 1.0, 0.01), "kl_estimator": "mc"}, (4, 2, 6)),
    ],
    ids=["default", "no_center", "deterministic_shift_mixture_prior_mc"],
)
def test_standard_battery(kwargs, input_shape):
    run_bayesian_layer_test(BayesianLayerNormalization, dict(kl_weight=0.01, **kwargs),
                            input_shape)


def _layer_with_random_posterior(dim=6, epsilon=1e-3):
    layer = BayesianLayerNormalization(epsilon=epsilon, kl_weight=0.0, seed=3)
    layer.build((None, dim))
    rng = np.random.default_rng(0)
    for loc, rho in (layer.kernel_params, layer.bias_params):
        loc.assign(rng.normal(size=dim).astype("float32"))
        rho.assign(rng.uniform(-2.0, -0.5, size=dim).astype("float32"))
    return layer


def test_mean_mode_equals_keras_layer_normalization():
    layer = _layer_with_random_posterior(epsilon=1e-3)
    x = np.random.default_rng(1).normal(2.0, 3.0, size=(4, 5, 6)).astype("float32")
    reference = keras.layers.LayerNormalization(epsilon=1e-3)
    reference.build(x.shape)
    reference.gamma.assign(layer.kernel_params[0])
    reference.beta.assign(layer.bias_params[0])
    tfp_bnn.set_mean_mode(layer)
    np.testing.assert_allclose(layer(x), reference(x), rtol=1e-5, atol=1e-5)
    gamma, gamma_var, beta, beta_var = (np.asarray(t) for t in layer.posterior_moments())
    np.testing.assert_array_equal(gamma, layer.kernel_params[0].numpy())
    np.testing.assert_array_equal(beta, layer.bias_params[0].numpy())
    np.testing.assert_array_equal(gamma_var, 0.0)
    np.testing.assert_array_equal(beta_var, 0.0)


def test_one_gain_draw_is_shared_by_the_batch():
    # out[b] = g * normalized(x[b]) + shift with the same (g, shift) for all b:
    # solving for g from two rows must agree across every other row.
    layer = _layer_with_random_posterior()
    x = np.random.default_rng(2).normal(size=(8, 6)).astype("float32")
    out = np.asarray(layer(x), "float64")
    n = _normalized(x, 1e-3)
    gain = (out[0] - out[1]) / (n[0] - n[1])
    shift = out[0] - gain * n[0]
    np.testing.assert_allclose(out, gain * n + shift, rtol=1e-4, atol=1e-4)
    assert not np.allclose(gain, layer.kernel_params[0].numpy(), atol=1e-3)


def test_posterior_moments_are_softplus_scales_squared():
    layer = _layer_with_random_posterior()
    gamma, gamma_var, beta, beta_var = (np.asarray(t) for t in layer.posterior_moments())
    np.testing.assert_allclose(gamma_var, _softplus(layer.kernel_params[1].numpy()) ** 2,
                               rtol=1e-5)
    np.testing.assert_allclose(beta_var, _softplus(layer.bias_params[1].numpy()) ** 2,
                               rtol=1e-5)
    assert gamma.shape == beta.shape == (6,)


def test_sampled_call_applies_gain_sample_s_to_tile_s():
    layer = _layer_with_random_posterior()
    model = keras.Sequential([keras.Input((3, 6)), layer])
    x = np.random.default_rng(3).normal(size=(4, 3, 6)).astype("float32")
    runner = MonteCarloRunner(model)
    num_samples = 5
    draws = runner.draw(num_samples)
    gains, shifts = (np.asarray(t) for t in draws[0])
    assert gains.shape == shifts.shape == (num_samples, 6)
    outputs = np.asarray(runner.call(x, draws, num_samples))
    expected = gains[:, None, None, :] * _normalized(x, 1e-3)[None] + shifts[:, None, None, :]
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-4)
    samples = tfp_bnn.predict.sample(model, x, num_samples=4)
    assert not np.allclose(samples[0], samples[1])
    tfp_bnn.set_mean_mode(model)
    samples = tfp_bnn.predict.sample(model, x, num_samples=4)
    np.testing.assert_allclose(samples, np.broadcast_to(model(x), samples.shape), atol=1e-5)


def test_statistics_are_float32_under_mixed_precision():
    # Activations near 1e3 have a variance near 1e6, past float16's 65504:
    # float16 statistics would give inf and a zero output.
    x = (1000.0 + 300.0 * np.random.default_rng(4).normal(size=(3, 8))).astype("float32")
    half = BayesianLayerNormalization(kl_weight=0.0, dtype="mixed_float16", seed=1)
    full = BayesianLayerNormalization(kl_weight=0.0, seed=1)
    tfp_bnn.set_mean_mode(half)
    tfp_bnn.set_mean_mode(full)
    out = half(x)
    assert out.dtype == "float16"
    out = np.asarray(out, "float32")
    assert np.all(np.isfinite(out))
    # float16 inputs carry a relative error of 2^-11 (0.5 at 1e3), i.e.
    # 0.5 / 300 in normalised units; allow twice that plus output rounding.
    np.testing.assert_allclose(out, full(x), atol=2 * 0.5 / 300 + 4e-3)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"axis": 1}, r"`axis`.*got 1"),
        ({"axis": (1, 2)}, r"`axis`"),
        ({"epsilon": 0.0}, r"`epsilon`.*0.0"),
        ({"epsilon": float("nan")}, r"`epsilon`"),
        ({"center": "yes"}, r"`center`.*'yes'"),
        ({"kl_weight": -1.0}, r"`kl_weight`"),
        ({"seed": -2}, r"`seed`"),
    ],
)
def test_constructor_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        BayesianLayerNormalization(**kwargs)


def test_unknown_feature_dimension_is_rejected():
    with pytest.raises(ValueError, match="known last input dimension"):
        BayesianLayerNormalization()(keras.Input((None,)))

"""`tfp_bnn.layers.SpectralNormalization`: SNGP's norm bound c on Keras's wrapper.

Keras 3's `run_layer_test` runs on this layer with the others in
tests/integration/test_keras_conformance.py.
"""

import keras
import numpy as np
import pytest

from tfp_bnn.layers import SpectralNormalization

# Power iteration converges at the rate (sigma_2 / sigma_1)^steps; 50 steps from the
# initial u leave the norm estimate exact to float32 for these random matrices.
STEPS = 50


def _spectral_norm(kernel):
    return np.linalg.norm(np.reshape(kernel, (-1, kernel.shape[-1])), 2)


def _wrapped(layer, kernel, x, bound=0.95):
    wrapper = SpectralNormalization(layer, norm_multiplier=bound, power_iterations=STEPS)
    wrapper(x)
    layer.kernel.assign(kernel)
    return wrapper


@pytest.mark.parametrize("norm", [0.5, 3.0], ids=["inside", "outside"])
def test_kernel_inside_the_bound_unchanged_outside_scaled_to_norm_c(norm):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(5, 4)).astype("float32")
    kernel *= norm / _spectral_norm(kernel)
    x = rng.normal(size=(3, 5)).astype("float32")
    dense = keras.layers.Dense(4)
    wrapper = _wrapped(dense, kernel, x)
    wrapper(x)  # inference: no normalisation
    np.testing.assert_array_equal(dense.kernel.numpy(), kernel)
    outputs = wrapper(x, training=True)
    if norm < 0.95:
        np.testing.assert_array_equal(dense.kernel.numpy(), kernel)
    else:
        np.testing.assert_allclose(dense.kernel.numpy(), kernel * 0.95 / norm, rtol=1e-5)
        np.testing.assert_allclose(_spectral_norm(dense.kernel.numpy()), 0.95, rtol=1e-5)
    # The layer ran on the normalised kernel.
    np.testing.assert_allclose(outputs, x @ dense.kernel.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_kernel_bound_on_its_reshaped_matrix_and_unit_bound_is_keras():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 6, 2)).astype("float32")
    kernel = rng.normal(size=(3, 3, 2, 4)).astype("float32")
    conv = keras.layers.Conv2D(4, 3)
    _wrapped(conv, kernel, x, bound=0.7)(x, training=True)
    np.testing.assert_allclose(_spectral_norm(conv.kernel.numpy()), 0.7, rtol=1e-5)
    # c = 1 above the bound is Keras's own normalisation W / sigma.
    ours, theirs = keras.layers.Conv2D(4, 3), keras.layers.Conv2D(4, 3)
    _wrapped(ours, kernel, x, bound=1.0)(x, training=True)
    keras_wrapper = keras.layers.SpectralNormalization(theirs, power_iterations=STEPS)
    keras_wrapper(x)
    theirs.kernel.assign(kernel)
    keras_wrapper(x, training=True)
    np.testing.assert_allclose(ours.kernel.numpy(), theirs.kernel.numpy(), rtol=1e-5)


def test_mixed_float16_keeps_float32_master_weights(mixed_float16):
    # Keras's wrapper reads the kernel autocast to float16 and writes it back: a kernel
    # inside the bound came back rounded to float16 in every training call.
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 5)).astype("float32")
    kernel = (0.01 * rng.normal(size=(5, 4))).astype("float32")
    assert not np.array_equal(kernel.astype("float16").astype("float32"), kernel)
    dense = keras.layers.Dense(4)
    wrapper = _wrapped(dense, kernel, x)
    outputs = wrapper(x, training=True)
    assert outputs.dtype == "float16" and dense.kernel.dtype == "float32"
    np.testing.assert_array_equal(dense.kernel.numpy(), kernel)


def _numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


@pytest.mark.jax
def test_trains_in_fit_within_the_bound_and_config_round_trip():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 4)).astype("float32")
    # Wants the rank-one kernel 5 [1 1; 0 0; ...] of norm 7: the bound binds, and with
    # sigma_2 << sigma_1 five power-iteration steps per call estimate sigma closely.
    y = 5.0 * np.repeat(x[:, :1], 2, axis=1)
    dense = keras.layers.Dense(2)
    model = keras.Sequential([keras.Input((4,)),
                              SpectralNormalization(dense, norm_multiplier=0.8,
                                                    power_iterations=5)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(x, y, epochs=3, batch_size=8, verbose=0)
    wrapper = model.layers[0]
    # Inference: TensorFlow runs the stored kernel, which the last training step
    # normalised before the optimizer moved it; JAX's trainer keeps the optimizer's
    # W (only u leaves the jitted step), so inference normalises it (one step from u).
    inference_kernel = (wrapper.normalized_weights(power_iterations=1)[1]
                        if keras.backend.backend() == "jax" else dense.kernel)
    predicted = model.predict(x, verbose=0)
    np.testing.assert_allclose(predicted, x @ _numpy(inference_kernel) + _numpy(dense.bias),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_numpy(model(x)), predicted, rtol=1e-6, atol=1e-6)  # eager
    if keras.backend.backend() == "jax":
        assert _spectral_norm(_numpy(inference_kernel)) <= 0.8 * (1 + 1e-4)
    # What the next training call assigns, from the u the fit's steps left.
    assert _spectral_norm(_numpy(wrapper.normalized_weights()[1])) <= 0.8 * (1 + 1e-4)
    clone = SpectralNormalization.from_config(wrapper.get_config())
    assert clone.get_config() == wrapper.get_config()
    assert clone.norm_multiplier == 0.8 and clone.power_iterations == 5


@pytest.mark.parametrize("kwargs, name", [
    ({"norm_multiplier": 0.0}, "norm_multiplier"), ({"norm_multiplier": "1"}, "norm_multiplier"),
    ({"power_iterations": 0}, "power_iterations"), ({"power_iterations": 1.5},
                                                    "power_iterations"),
])
def test_bad_arguments_raise_one_line_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`") as error:
        SpectralNormalization(keras.layers.Dense(2), **kwargs)
    assert "\n" not in str(error.value)


def test_power_iterations_over_the_cap_are_refused():
    # The steps are unrolled into the traced training step: 10**7 never finished tracing.
    with pytest.raises(ValueError, match=r"^`power_iterations` must be an int in 1\.\.1,000, "
                                         r"got 10000000\.$"):
        SpectralNormalization(keras.layers.Dense(2), power_iterations=10**7)
    assert SpectralNormalization(keras.layers.Dense(2), power_iterations=1000).power_iterations \
        == 1000

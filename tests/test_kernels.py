"""`tfp_bnn.kernels`: the registered kernel providers of the Gaussian-process layers."""

import math

import keras
import numpy as np
import pytest

from tfp_bnn import kernels
from tfp_bnn.kernels import ExponentiatedQuadraticProvider


@pytest.fixture(scope="module")
def built():
    provider = ExponentiatedQuadraticProvider(amplitude=1.7, length_scale=0.4,
                                              amplitude_multiplier=0.1,
                                              length_scale_multiplier=5.0)
    layer = keras.layers.Layer(dtype="float64")
    return provider, layer, provider.build(layer)


def test_build_adds_two_weights_at_the_initial_values(built):
    provider, layer, copy = built
    assert [w.name for w in layer.weights] == ["amplitude", "length_scale"]
    assert provider.variables is None and copy == provider  # the copy holds them
    # Unconstrained w with a = softplus(0.1 w), l = softplus(5 w).
    np.testing.assert_allclose([float(w) for w in layer.weights],
                               [math.log(math.expm1(1.7)) / 0.1,
                                math.log(math.expm1(0.4)) / 5.0], rtol=1e-14)


def test_kernel_is_the_exponentiated_quadratic(built):
    _, layer, copy = built
    x = np.array([[0.0], [0.3], [-1.1]])
    expected = 1.7 ** 2 * np.exp(-0.5 * ((x - x.T) / 0.4) ** 2)
    np.testing.assert_allclose(copy.kernel.matrix(x, x), expected, rtol=1e-12)
    layer.weights[1].assign(0.0)  # the kernel reads the current weights
    np.testing.assert_allclose(float(copy.kernel.length_scale), math.log(2.0), rtol=1e-14)
    layer.weights[1].assign(math.log(math.expm1(0.4)) / 5.0)


def test_unbuilt_provider_has_no_kernel():
    with pytest.raises(ValueError, match=r"use the provider that `build\(layer\)` returns"):
        ExponentiatedQuadraticProvider().kernel


def test_get_resolves_names_instances_and_configs():
    provider = ExponentiatedQuadraticProvider(length_scale=2.0, trainable=False)
    assert kernels.get("exponentiated_quadratic") == ExponentiatedQuadraticProvider()
    assert kernels.get(provider) is provider
    assert kernels.get(keras.saving.serialize_keras_object(provider)) == provider
    with pytest.raises(ValueError, match=r"Unknown `kernel_provider` 'matern'"):
        kernels.get("matern")


def test_frozen_provider_adds_non_trainable_weights():
    layer = keras.layers.Layer()
    ExponentiatedQuadraticProvider(trainable=False).build(layer)
    assert len(layer.non_trainable_weights) == 2 and not layer.trainable_weights


@pytest.mark.parametrize("argument", ["amplitude", "length_scale", "amplitude_multiplier",
                                      "length_scale_multiplier"])
def test_non_positive_arguments_are_refused(argument):
    with pytest.raises(ValueError, match=rf"`{argument}` must be a finite number > 0, got 0"):
        ExponentiatedQuadraticProvider(**{argument: 0})


def test_a_tfp_kernel_provider_layer_is_refused_with_the_provider_to_write():
    pytest.importorskip("tf_keras")  # TFP's kernel providers are tf_keras layers
    from tests.integration.tfp_builders import RBFKernelFn  # noqa: PLC0415 - after the skip

    with pytest.raises(ValueError, match=r"^`kernel_provider` is a layer with a `kernel` "
                       r"property.*ExponentiatedQuadraticProvider\(amplitude=0.693147, "
                       r"length_scale=0.693147\).*0.1 and 5.0") as info:
        kernels.get(RBFKernelFn())
    assert "\n" not in str(info.value)

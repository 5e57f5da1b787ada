"""Kernel providers: the trainable covariance functions of tfp_bnn's Gaussian-process layers.

`tfp.layers.VariationalGaussianProcess` takes a `kernel_provider`, a tf_keras
layer that owns the kernel's variables and exposes them through a `kernel`
property (TFP's regression tutorial writes an `RBFKernelFn` layer for it).
A Python class defined in a notebook cannot be saved to a `.keras` file and
loaded with `safe_mode=True`, so tfp_bnn ships the provider as a small
registered object, like its priors: `build(layer)` adds the kernel's
variables to the layer that uses it and returns a copy holding them, whose
`kernel` is a `tfp.math.psd_kernels.PositiveSemidefiniteKernel`.

Example:
>>> provider = tfp_bnn.kernels.ExponentiatedQuadraticProvider(amplitude=1.0, length_scale=0.5)
>>> vgp = tfp_bnn.layers.VariationalGaussianProcess(16, kernel_provider=provider)
>>> vgp(np.zeros((3, 2), "float32")).shape   # a sample of f at 3 points
TensorShape([3, 1])
"""

import math

import keras
import numpy as np
from tfp_bnn._tf import tf
from tfp_bnn._substrate import tfp

from tfp_bnn import _validation as check
from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.config_objects import resolve

psd_kernels = tfp.math.psd_kernels


class KernelProvider(ConfigObject):
    """Base class of kernel providers.

    Subclasses implement `build(layer)` (create the variables with
    `layer.add_weight` and return a copy holding them), the `kernel`
    property of that copy and `get_config`. `feature_ndims` is the number of
    trailing input axes one index point has (1: points are vectors).

    Example:
    >>> class LinearProvider(KernelProvider):
    ...     def build(self, layer):
    ...         built = LinearProvider()
    ...         built.bias = layer.add_weight(name="bias", shape=(), initializer="ones")
    ...         return built
    ...     @property
    ...     def kernel(self):
    ...         return tfp.math.psd_kernels.Linear(bias_amplitude=self.bias)
    >>> layer = tfp_bnn.layers.VariationalGaussianProcess(4, kernel_provider=LinearProvider())
    >>> layer(np.zeros((2, 3), "float32")).shape
    TensorShape([2, 1])
    """

    feature_ndims = 1

    def build(self, layer):
        raise NotImplementedError

    @property
    def kernel(self):
        raise NotImplementedError


def _inverse_softplus(value):
    return math.log(math.expm1(value))


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ExponentiatedQuadraticProvider(KernelProvider):
    """Trainable exponentiated-quadratic (RBF) kernel, a^2 exp(-|x - x'|^2 / (2 l^2)).

    The amplitude a and the length scale l are softplus of unconstrained
    weights `amplitude` and `length_scale` times a multiplier:
    a = softplus(amplitude_multiplier * w_a). The multipliers change only
    how fast gradient steps move a and l; TFP's regression tutorial uses
    0.1 and 5 with w = 0 at the start, which is
    `ExponentiatedQuadraticProvider(amplitude=math.log(2), length_scale=math.log(2),
    amplitude_multiplier=0.1, length_scale_multiplier=5.0)`.

    Args:
        amplitude: initial a, > 0.
        length_scale: initial l, > 0.
        amplitude_multiplier: factor on the unconstrained amplitude weight, > 0.
        length_scale_multiplier: factor on the unconstrained length-scale weight, > 0.
        trainable: whether `fit` learns a and l.

    Example:
    >>> provider = ExponentiatedQuadraticProvider(amplitude=2.0, length_scale=0.5)
    >>> built = provider.build(keras.layers.Layer())
    >>> kernel = built.kernel
    >>> float(kernel.amplitude), float(kernel.length_scale)
    (2.0, 0.5)
    >>> float(kernel.apply(np.zeros(3, "float32"), np.zeros(3, "float32")))  # a^2
    4.0
    """

    def __init__(self, amplitude=1.0, length_scale=1.0, amplitude_multiplier=1.0,
                 length_scale_multiplier=1.0, trainable=True):
        self.amplitude = check.positive("amplitude", amplitude)
        self.length_scale = check.positive("length_scale", length_scale)
        self.amplitude_multiplier = check.positive("amplitude_multiplier", amplitude_multiplier)
        self.length_scale_multiplier = check.positive("length_scale_multiplier",
                                                      length_scale_multiplier)
        self.trainable = check.boolean("trainable", trainable)
        self.variables = None  # (amplitude, length_scale) weights on the copy `build` returns

    def build(self, layer):
        """Adds the weights `amplitude` and `length_scale` to `layer`.

        Args:
            layer: the Keras layer that owns the weights (the GP layer).

        Returns:
            A new provider with the same configuration whose `kernel` reads
            those weights; this provider stays unbuilt.
        """
        built = type(self)(**self.get_config())
        weights = []
        for name, value, multiplier in (
                ("amplitude", self.amplitude, self.amplitude_multiplier),
                ("length_scale", self.length_scale, self.length_scale_multiplier)):
            # A NumPy float64: Keras' Constant rounds a Python float through float32.
            start = np.float64(_inverse_softplus(value) / multiplier)
            weights.append(layer.add_weight(name=name, shape=(), trainable=self.trainable,
                                            initializer=keras.initializers.Constant(start)))
        built.variables = tuple(weights)
        return built

    def _positive(self, weight, multiplier):
        return tf.nn.softplus(multiplier * tf.convert_to_tensor(weight))

    @property
    def kernel(self):
        """The `psd_kernels.ExponentiatedQuadratic` at the current weights."""
        if self.variables is None:
            raise ValueError(
                "ExponentiatedQuadraticProvider has no variables yet: use the provider that "
                "`build(layer)` returns (a built layer's `kernel_provider`).")
        amplitude, length_scale = self.variables
        return psd_kernels.ExponentiatedQuadratic(
            amplitude=self._positive(amplitude, self.amplitude_multiplier),
            length_scale=self._positive(length_scale, self.length_scale_multiplier),
            feature_ndims=self.feature_ndims)

    def get_config(self):
        return {
            "amplitude": self.amplitude,
            "length_scale": self.length_scale,
            "amplitude_multiplier": self.amplitude_multiplier,
            "length_scale_multiplier": self.length_scale_multiplier,
            "trainable": self.trainable,
        }


_PROVIDERS = {"exponentiated_quadratic": ExponentiatedQuadraticProvider}


def get(identifier):
    """Resolves `identifier` (a `KernelProvider`, a name or a serialized dict) to a provider.

    Args:
        identifier: a `KernelProvider` (returned as it is), the name
            "exponentiated_quadratic" (built with default arguments), or the
            dict `keras.saving.serialize_keras_object` made of a provider.

    Returns:
        A `KernelProvider`.

    Example:
    >>> get("exponentiated_quadratic")
    ExponentiatedQuadraticProvider(amplitude=1.0, length_scale=1.0, ...)
    """
    if not isinstance(identifier, (KernelProvider, str, dict)) and hasattr(identifier, "kernel"):
        raise ValueError(
            "`kernel_provider` is a layer with a `kernel` property, as tfp.layers takes "
            f"(got {identifier!r}); tfp_bnn takes a registered tfp_bnn.kernels.KernelProvider "
            "whose variables live in the GP layer, so the model saves: "
            f"{_provider_advice(identifier)}."
        )
    return resolve(identifier, KernelProvider, _PROVIDERS, "kernel_provider")


def _provider_advice(layer):
    """What to pass instead of TFP's kernel-provider layer `layer`, read off its kernel."""
    advice = ("for an exponentiated-quadratic kernel pass "
              "ExponentiatedQuadraticProvider(amplitude=, length_scale=, amplitude_multiplier=, "
              "length_scale_multiplier=) (TFP's regression notebook's RBFKernelFn is "
              "ExponentiatedQuadraticProvider(amplitude=math.log(2), length_scale=math.log(2), "
              "amplitude_multiplier=0.1, length_scale_multiplier=5.0)); for another kernel "
              "subclass tfp_bnn.kernels.KernelProvider (`build(layer)` adds its variables, "
              "`kernel` returns the PSD kernel)")
    try:
        kernel = layer.kernel
        if not isinstance(kernel, psd_kernels.ExponentiatedQuadratic):
            return advice
        amplitude = float(kernel.amplitude)
        length_scale = float(kernel.length_scale)
    except Exception:  # noqa: BLE001 - any user layer: the general advice then
        return advice
    return (f"its kernel is an ExponentiatedQuadratic with amplitude {amplitude:.6g} and length "
            f"scale {length_scale:.6g} now: pass ExponentiatedQuadraticProvider("
            f"amplitude={amplitude:.6g}, length_scale={length_scale:.6g}), adding "
            "amplitude_multiplier= / length_scale_multiplier= if the layer multiplies its "
            "weights before the softplus (the regression notebook's RBFKernelFn: 0.1 and 5.0)")

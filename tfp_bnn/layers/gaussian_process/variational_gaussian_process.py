"""Variational Gaussian-process output layer (TFP's `VariationalGaussianProcess`)."""

import keras
import numpy as np
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn import _variables
from tfp_bnn import kernels
from tfp_bnn._substrate import tfb
from tfp_bnn._substrate import tfd
from tfp_bnn.distributions.carrier import distribution_of
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers.distribution.distribution_lambda import DistributionLambda
from tfp_bnn.layers.distribution.distribution_lambda import serialize_callable

# What the output tensor forwards beyond the distribution methods every
# distribution layer forwards: the ELBO pieces TFP's tutorial loss calls.
VARIATIONAL_METHODS = ("variational_loss", "surrogate_posterior_kl_divergence_prior")

@keras.saving.register_keras_serializable(package="tfp_bnn")
class VariationalGaussianProcess(DistributionLambda):
    """Sparse variational Gaussian process over the layer's inputs, with inducing points.

    Keras 3 counterpart of `tfp.layers.VariationalGaussianProcess`, same
    arguments and semantics: the output is the SVGP posterior predictive of
    Hensman, Fusi & Lawrence (2013), "Gaussian Processes for Big Data"
    (UAI), with the inducing-point variational family of Titsias (2009),
    "Variational Learning of Inducing Variables in Sparse Gaussian
    Processes" (AISTATS). For each of the `event_shape[0]` output functions,
    q(u) = N(m, S S^T) at M trainable inducing points Z, and at inputs X

        mean = mu(X) + K_xz K_zz^-1 (m - mu(Z))
        cov  = K_xx - K_xz K_zz^-1 (K_zz - S S^T) K_zz^-1 K_zx + sigma^2 I

    jointly over the batch (a `tfd.VariationalGaussianProcess`, its event
    transposed to [batch, event_shape[0]] as TFP does). Train by the
    negative ELBO, as TFP's regression tutorial does:
    `loss=lambda y, rv_y: rv_y.variational_loss(y, kl_weight=batch_size / N)`
    (the expected log-likelihood of the batch plus batch_size / N times
    KL(q(u) || p(u)): the batch's share of the whole data's ELBO). Under
    `float64` set `keras.config.set_floatx("float64")` as the tutorial does
    and `keras.config.set_dtype_policy("float64")` (Keras 3 fixes the policy
    when it makes its first layer), so that Keras does not cast the output
    before the loss.

    As in TFP, the expected log-likelihood in `variational_loss` is taken
    under the predictive with the observation noise, which adds a constant
    1/2 per observation to the loss (no effect on gradients); the port keeps
    TFP's value. Only the variational scale's lower triangle is used.

    Deviations from TFP: the kernel provider is a registered
    `tfp_bnn.kernels.KernelProvider` whose variables live in this layer
    (saved with it), not a tf_keras layer; `event_shape` has one axis (as
    TFP's layer effectively requires); under mixed precision the GP runs and
    returns float32 (Cholesky has no float16 kernel).

    On Keras' JAX backend the layer trains in a compiled `fit` as on
    TensorFlow: the output array forwards `variational_loss` to the
    distribution through `tfp_bnn.distributions.carrier`'s table, and an
    eager call returns the distribution itself.

    Args:
        num_inducing_points: M, the number of inducing points.
        kernel_provider: a `tfp_bnn.kernels.KernelProvider`, e.g.
            `ExponentiatedQuadraticProvider()`, or its name
            ("exponentiated_quadratic").
        event_shape: (E,) or E: E independent output functions.
        inducing_index_points_initializer: Keras initializer of Z, shape
            [E, M, features] (a `Constant` array of shape [M, features] is
            broadcast); None: glorot_uniform, as TFP's default.
        unconstrained_observation_noise_variance_initializer: initializer of
            w, sigma^2 = softplus(w) (default Constant(-10), TFP's); None: no
            observation noise.
        variational_inducing_observations_scale_initializer: initializer of S
            [E, M, M]; None: 1e-5 * identity, TFP's.
        mean_fn: None for a trainable constant prior mean (TFP's default), or
            a callable x -> mean; register it with
            `keras.saving.register_keras_serializable()` to save the model.
        jitter: added to the diagonals of the kernel matrices, >= 0.
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable; see `DistributionLambda`.
        seed: int or None, for convert_to_tensor_fn="sample".
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: index points [batch, features].

    Returns:
        Tensor [batch, E] carrying the predictive distribution and forwarding
        `variational_loss(y, kl_weight=1.)` and
        `surrogate_posterior_kl_divergence_prior()`.

    Example:
    >>> n = 100   # training examples; batches of 32
    >>> model = keras.Sequential([keras.Input((1,)), VariationalGaussianProcess(
    ...     16, tfp_bnn.kernels.ExponentiatedQuadraticProvider(), event_shape=(1,),
    ...     inducing_index_points_initializer=keras.initializers.Constant(
    ...         np.linspace(-1, 1, 16)[:, None]))])
    >>> model.compile("adam", loss=lambda y, rv_y: rv_y.variational_loss(y, kl_weight=32 / n))
    >>> model(np.zeros((4, 1), "float32")).shape
    TensorShape([4, 1])
    """

    def __init__(self, num_inducing_points, kernel_provider, event_shape=(1,),
                 inducing_index_points_initializer=None,
                 unconstrained_observation_noise_variance_initializer=-10.0,
                 variational_inducing_observations_scale_initializer=None,
                 mean_fn=None, jitter=1e-6, convert_to_tensor_fn="sample", seed=None,
                 **kwargs):
        kwargs.pop("make_distribution_fn", None)
        super().__init__(convert_to_tensor_fn=convert_to_tensor_fn, seed=seed, **kwargs)
        self.num_inducing_points = _validation.integer("num_inducing_points",
                                                       num_inducing_points)
        self.kernel_provider = kernels.get(kernel_provider)
        self.event_shape = _validation.shape("event_shape", event_shape)
        if len(self.event_shape) != 1:
            raise ValueError(f"`event_shape` must have one axis (E,), got {event_shape!r}.")
        self.inducing_index_points_initializer = _validation.initializer(
            "inducing_index_points_initializer", inducing_index_points_initializer,
            allow_none=True)
        noise = unconstrained_observation_noise_variance_initializer
        if isinstance(noise, (int, float)) and not isinstance(noise, bool):
            # A NumPy float64: Keras' Constant rounds a Python float through float32.
            noise = keras.initializers.Constant(np.float64(_validation.number(
                "unconstrained_observation_noise_variance_initializer", noise)))
        self.unconstrained_observation_noise_variance_initializer = _validation.initializer(
            "unconstrained_observation_noise_variance_initializer", noise, allow_none=True)
        self.variational_inducing_observations_scale_initializer = _validation.initializer(
            "variational_inducing_observations_scale_initializer",
            variational_inducing_observations_scale_initializer, allow_none=True)
        if isinstance(mean_fn, dict):
            mean_fn = keras.saving.deserialize_keras_object(mean_fn)
        if mean_fn is not None and not callable(mean_fn):
            raise ValueError(f"`mean_fn` must be None or a callable x -> mean, got {mean_fn!r}.")
        self.mean_fn = mean_fn
        self.jitter = _validation.number("jitter", jitter, low=0.0)

    def build(self, input_shape):
        features = tuple(input_shape[-self.kernel_provider.feature_ndims:])
        if len(input_shape) < 2 or any(d is None for d in features):
            raise ValueError(f"VariationalGaussianProcess needs inputs [batch, features] with "
                             f"known features, got input shape {tuple(input_shape)}.")
        event, m = list(self.event_shape), self.num_inducing_points
        if self.mean_fn is None:
            self.mean = self.add_weight(name="mean", shape=(), initializer="zeros")
        self.observation_noise_variance = None
        if self.unconstrained_observation_noise_variance_initializer is not None:
            self.observation_noise_variance = self.add_weight(
                name="observation_noise_variance", shape=(),
                initializer=self.unconstrained_observation_noise_variance_initializer)
        self.inducing_index_points = self.add_weight(
            name="inducing_index_points", shape=event + [m] + list(features),
            initializer=self.inducing_index_points_initializer or "glorot_uniform")
        self.variational_inducing_observations_loc = self.add_weight(
            name="variational_inducing_observations_loc", shape=event + [m],
            initializer="zeros")
        self.variational_inducing_observations_scale = self.add_weight(
            name="variational_inducing_observations_scale", shape=event + [m, m],
            initializer=(self.variational_inducing_observations_scale_initializer
                         or keras.initializers.Constant(1e-5 * np.eye(m))))
        self._provider_config = self.kernel_provider
        self.kernel_provider = self.kernel_provider.build(self)

    def _prior_mean(self, x):
        if self.mean_fn is not None:
            return self.mean_fn(x)
        return _variables.read(self.mean)

    def make_distribution(self, inputs):
        x = ops.convert_to_tensor(inputs)  # at the variables' dtype (see `call`)
        noise = (ops.zeros((), x.dtype) if self.observation_noise_variance is None
                 else ops.softplus(_variables.read(self.observation_noise_variance)))
        vgp = tfd.VariationalGaussianProcess(
            kernel=self.kernel_provider.kernel,
            index_points=x,
            inducing_index_points=_variables.read(self.inducing_index_points),
            variational_inducing_observations_loc=_variables.read(
                self.variational_inducing_observations_loc),
            variational_inducing_observations_scale=_variables.read(
                self.variational_inducing_observations_scale),
            mean_fn=self._prior_mean,
            observation_noise_variance=noise,
            jitter=self.jitter)
        # The GP's batch is the E output functions and its event the batch of
        # inputs; the transpose makes the event [batch, E], a Keras output.
        transpose = tfb.Transpose(rightmost_transposed_ndims=2)
        distribution = tfd.TransformedDistribution(
            tfd.Independent(vgp, reinterpreted_batch_ndims=1), bijector=transpose)

        def variational_loss(y, kl_weight=1.0):
            """Negative ELBO of observations y [batch, E] (TFP's `variational_loss`)."""
            return vgp.variational_loss(transpose.forward(y), kl_weight=kl_weight)

        distribution.variational_loss = variational_loss
        distribution.surrogate_posterior_kl_divergence_prior = (
            vgp.surrogate_posterior_kl_divergence_prior)
        return distribution

    def call(self, inputs):
        # The GP runs at the variables' dtype: under mixed precision float32, as
        # Cholesky has no float16 kernel and a float16 K_zz would not factor anyway.
        with float32_variables():
            value = super().call(ops.cast(inputs, self.variable_dtype))
        if _backend.is_jax():
            # The array (or, called eagerly, the distribution itself) forwards them
            # through the carrier's table (`tfp_bnn.distributions.carrier`).
            return value
        distribution = distribution_of(value)
        for name in VARIATIONAL_METHODS:
            setattr(value, name, getattr(distribution, name))
        return value

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-self.kernel_provider.feature_ndims]) + self.event_shape

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self.variable_dtype)

    def get_config(self):
        config = super().get_config()
        provider = getattr(self, "_provider_config", self.kernel_provider)
        serialize = keras.initializers.serialize
        config.update({
            "num_inducing_points": self.num_inducing_points,
            "kernel_provider": keras.saving.serialize_keras_object(provider),
            "event_shape": self.event_shape,
            "inducing_index_points_initializer": serialize(
                self.inducing_index_points_initializer),
            "unconstrained_observation_noise_variance_initializer": serialize(
                self.unconstrained_observation_noise_variance_initializer),
            "variational_inducing_observations_scale_initializer": serialize(
                self.variational_inducing_observations_scale_initializer),
            "mean_fn": (None if self.mean_fn is None
                        else serialize_callable("mean_fn", self.mean_fn)),
            "jitter": self.jitter,
        })
        return config

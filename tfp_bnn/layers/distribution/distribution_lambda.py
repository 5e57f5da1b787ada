"""A layer whose output is a distribution: TFP's `DistributionLambda` in Keras 3."""

import math

import keras
import numpy as np
from tfp_bnn._tf import tf
from tfp_bnn._substrate import tfp

from tfp_bnn import _backend
from tfp_bnn import _keras_internals
from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn._substrate import tfd
from tfp_bnn.distributions.carrier import attach
from tfp_bnn.distributions.carrier import value_of
from tfp_bnn.distributions.carrier import with_value

# The values a distribution layer's output can hold, by name: TFP's default
# `tfd.Distribution.sample`, the `.mean` and `.mode` its examples use, and the
# other methods that need no argument and return a value shaped like a sample.
CONVERT_TO_TENSOR_FNS = ("sample", "mean", "mode", "stddev", "variance")


def convert_to_tensor_name(fn):
    """The name for TFP's `tfd.Distribution.<method>` values, else `fn` unchanged.

    A ported program passes `convert_to_tensor_fn=tfd.Distribution.mean`; saved
    as a function it could not be found again on loading (it is a method), so
    the layer keeps its name, "mean", which loads with `safe_mode=True`.
    TFP also takes the method as a property object.
    """
    if isinstance(fn, property):
        fn = fn.fget
    for name in CONVERT_TO_TENSOR_FNS:
        # TFP's TensorFlow methods, and on JAX its JAX substrate's.
        if fn is getattr(tfp.distributions.Distribution, name) or fn is getattr(
                tfd.Distribution, name):
            return name
    return fn


def _from_saved_tfp_method(config):
    """The name of a `tfd.Distribution` method that an older file saved as a function (which
    could not load), so that those files load; any other value unchanged."""
    if (isinstance(config, dict) and config.get("class_name") == "function"
            and str(config.get("module", "")).startswith("tensorflow_probability")
            and config.get("config") in CONVERT_TO_TENSOR_FNS):
        return config["config"]
    return config


def serialize_callable(argument, fn):
    """`keras.saving.serialize_keras_object(fn)`, or ValueError if the file could not load it.

    As for Keras' `Lambda` layer, a lambda is saved as its code (loading it
    needs `safe_mode=False`) and a registered function by its name. Any other
    callable (an unregistered function, a method, a nested function, a
    partial) would be saved by a name nothing can find again, and the model
    would fail only when someone loads it: refused here, at saving, instead.
    """
    name = getattr(fn, "__name__", None)
    registered = fn if name is not None else type(fn)  # a function, or an object's class
    if name == "<lambda>" or keras.saving.get_registered_object(
            keras.saving.get_registered_name(registered)) is registered:
        return keras.saving.serialize_keras_object(fn)
    raise ValueError(
        f"`{argument}`={fn!r} cannot be saved: a .keras file finds a function again by its "
        "registered name; decorate it with @keras.saving.register_keras_serializable() (or "
        "pass a lambda, which loads with safe_mode=False)."
    )


class ParamsSize(int):
    """What `params_size` returns: an int that also reads as TFP's int32 value.

    TFP's `params_size` gives a NumPy int32 (a tensor for tensor arguments),
    which Keras 3's `Dense(units)` refuses, while ported programs write
    `keras.layers.Dense(IndependentNormal.params_size(1))`. This value is a
    Python int, so `Dense` takes it, with the `dtype`, `shape` and `numpy()`
    of TFP's int32, and `tf.convert_to_tensor` makes it an int32 tensor.
    """

    ndim = 0
    # Keras 3.10 checks each entry of a weight's shape with
    # `standardize_dtype(type(entry))`, which reads the class's `name`: an int
    # subclass without one is refused there ("Invalid dtype: ParamsSize").
    name = "int32"

    # Properties, so that importing the module does not load TensorFlow.
    @property
    def dtype(self):
        return tf.int32

    @property
    def shape(self):
        return tf.TensorShape([])

    def numpy(self):
        return np.int32(self)


def _eager_on_jax(inputs):
    """True for an eager call on JAX (`model(x)`): concrete inputs, outside Keras' steps."""
    import jax  # noqa: PLC0415 - the JAX backend imported it already

    return not _keras_internals.in_stateless_scope() and not any(
        isinstance(x, jax.core.Tracer) for x in keras.tree.flatten(inputs))


def independent(distribution, event_shape, validate_args):
    """`distribution` with its last len(event_shape) batch axes made the event."""
    return tfd.Independent(distribution, reinterpreted_batch_ndims=len(event_shape),
                           validate_args=validate_args)


def _default_dtype(kwargs):
    # A distribution's log-density in float16 keeps three digits and its
    # sample overflows easily: the head computes in float32 under mixed
    # precision, as Keras advises for a model's last softmax.
    if "dtype" not in kwargs and keras.config.dtype_policy().compute_dtype in ("float16",
                                                                               "bfloat16"):
        kwargs["dtype"] = "float32"
    return kwargs


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DistributionLambda(keras.layers.Layer):
    """Turns its input into a `tfd.Distribution` and returns a tensor carrying it.

    Keras 3 counterpart of `tfp.layers.DistributionLambda` (tf_keras only).
    The output is TFP's `convert_to_tensor_fn` of the distribution (a sample
    by default) and carries the distribution itself: TFP's loss
    `lambda y, rv_y: -rv_y.log_prob(y)` and `model(x).mean()` work as in
    TFP, `tfp_bnn.losses.NegativeLogLikelihood()` is the same loss as a
    registered class, and `tfp_bnn.distributions.distribution_of(t)` returns
    the distribution. It must be the model's last layer, or be followed
    only by `KLDivergenceAddLoss` (see `tfp_bnn.distributions`).

    On the JAX backend the distribution is of TFP's JAX substrate: an eager
    call (`model(x)`) returns the distribution itself
    (`tfp_bnn.distributions.value_of` gives its value), while `fit`,
    `evaluate` and `predict` see the value, which carries the distribution
    to the loss.

    Args:
        make_distribution_fn: callable `t -> tfd.Distribution`. Any callable
            works in a running program; to save the model to `.keras` and
            load it with `safe_mode=True`, use a function registered with
            `keras.saving.register_keras_serializable()` (a lambda, as in
            Keras' own `Lambda` layer, loads only with `safe_mode=False`),
            or one of the ready layers (`IndependentNormal`, ...); saving
            another callable raises a ValueError naming this argument.
        convert_to_tensor_fn: what the output tensor holds: "sample"
            (TFP's default), "mean", "mode", "stddev", "variance" (TFP's
            `tfd.Distribution.sample`, `.mean`, ... are taken as these
            names, so the model saves), or a callable `distribution ->
            tensor`: saving needs it registered with
            `keras.saving.register_keras_serializable()` or a lambda (which
            loads with `safe_mode=False`, as for Keras' `Lambda`); saving
            another callable raises a ValueError naming this argument.
        seed: int or None, seeds the samples of convert_to_tensor_fn="sample".
        **kwargs: base layer arguments (name, dtype, ...). Under a mixed
            precision policy the layer defaults to float32.

    Call arguments:
        inputs: the distribution's parameters (any tensor structure the
            function accepts).

    Returns:
        The tensor `convert_to_tensor_fn(distribution)`, carrying the
        distribution.

    Example:
    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2),
    ...     DistributionLambda(
    ...         lambda t: tfd.Normal(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:])))])
    >>> model.compile("adam", loss=lambda y, rv_y: -rv_y.log_prob(y))
    >>> model(np.zeros((3, 1), "float32")).stddev().shape   # the output carries the Normal
    TensorShape([3, 1])
    """

    def __init__(self, make_distribution_fn=None, convert_to_tensor_fn="sample", seed=None,
                 **kwargs):
        super().__init__(**_default_dtype(kwargs))
        if make_distribution_fn is not None and not callable(make_distribution_fn):
            raise ValueError("`make_distribution_fn` must be a callable t -> tfd.Distribution, "
                             f"got {make_distribution_fn!r}.")
        if make_distribution_fn is None and type(self).make_distribution is \
                DistributionLambda.make_distribution:
            raise ValueError("DistributionLambda needs `make_distribution_fn`, a callable "
                             "t -> tfd.Distribution.")
        self.make_distribution_fn = make_distribution_fn
        convert_to_tensor_fn = convert_to_tensor_name(_from_saved_tfp_method(convert_to_tensor_fn))
        if isinstance(convert_to_tensor_fn, str):
            if convert_to_tensor_fn not in CONVERT_TO_TENSOR_FNS:
                raise ValueError(f"`convert_to_tensor_fn` must be one of "
                                 f"{CONVERT_TO_TENSOR_FNS} or a callable, got "
                                 f"{convert_to_tensor_fn!r}.")
        elif not callable(convert_to_tensor_fn):
            raise ValueError(f"`convert_to_tensor_fn` must be one of {CONVERT_TO_TENSOR_FNS} or "
                             f"a callable distribution -> tensor, got {convert_to_tensor_fn!r}.")
        self.convert_to_tensor_fn = convert_to_tensor_fn
        self.seed = _validation.seed(seed, allow_none=True)
        self.seed_generator = (keras.random.SeedGenerator(seed)
                               if convert_to_tensor_fn == "sample" else None)

    def make_distribution(self, params):
        """The distribution for parameters `params` (subclasses override this).

        Args:
            params: the layer's input tensor.

        Returns:
            `make_distribution_fn(params)`, a `tfd.Distribution`.
        """
        return self.make_distribution_fn(params)

    def _value(self, distribution, seed=None):
        fn = self.convert_to_tensor_fn
        if fn == "sample":
            return distribution.sample(
                seed=noise.next_seed(self.seed_generator) if seed is None else seed)
        if isinstance(fn, str):
            return getattr(distribution, fn)()
        return fn(distribution)

    def call(self, inputs):
        distribution = self.make_distribution(inputs)
        if not hasattr(distribution, "log_prob"):
            raise ValueError(f"{type(self).__name__}'s make_distribution_fn must return a "
                             f"tfd.Distribution, got {type(distribution).__name__}.")
        if _backend.is_jax():
            return self._jax_output(inputs, distribution)
        # A fresh tensor object per call: the distribution is attached to it.
        return attach(tf.identity(self._value(distribution)), distribution)

    def _jax_output(self, inputs, distribution):
        if not _eager_on_jax(inputs):
            # A copy: a value object of its own, which the distribution does not hold
            # (the table entry must die with it).
            return attach(keras.ops.copy(self._value(distribution)), distribution)
        # Eager: the distribution, with its value drawn when asked for (each eager
        # operation is a JAX program of its own); the seed is taken now, as in a step.
        seed = noise.next_seed(self.seed_generator) if self.convert_to_tensor_fn == "sample" \
            else None
        output = with_value(distribution, lambda: self._value(distribution, seed))
        # Keras regularizes tensor outputs only: the eager distribution's term is added here.
        if self.activity_regularizer is not None:
            loss = self.activity_regularizer(output)
            value = value_of(output)
            if len(value.shape) > 0:
                loss = keras.ops.divide_no_nan(
                    loss, keras.ops.cast(keras.ops.shape(value)[0], loss.dtype))
            self.add_loss(loss)
        return output

    def get_config(self):
        config = super().get_config()
        fn = self.convert_to_tensor_fn
        config.update({
            "convert_to_tensor_fn": fn if isinstance(fn, str)
            else serialize_callable("convert_to_tensor_fn", fn),
            "seed": self.seed,
        })
        if self.make_distribution_fn is not None:
            config["make_distribution_fn"] = serialize_callable("make_distribution_fn",
                                                                self.make_distribution_fn)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["convert_to_tensor_fn"] = _from_saved_tfp_method(
            config.get("convert_to_tensor_fn", "sample"))
        for key in ("make_distribution_fn", "convert_to_tensor_fn"):
            if isinstance(config.get(key), dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


class EventShapeDistribution(DistributionLambda):
    """A `DistributionLambda` of a fixed family and event shape (TFP's named layers).

    Subclasses define `new(params, event_shape, validate_args)` and, when a
    distribution takes more than one parameter per element,
    `params_size(event_shape)` as static methods, as TFP's layers do; the
    layer checks that its input's last axis has `params_size` values.
    """

    @staticmethod
    def params_size(event_shape=()):
        """prod(event_shape): one parameter per element of the event."""
        return ParamsSize(EventShapeDistribution._size(
            _validation.shape("event_shape", event_shape)))

    def __init__(self, event_shape=(), convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("make_distribution_fn", None)
        super().__init__(convert_to_tensor_fn=convert_to_tensor_fn, **kwargs)
        self.event_shape = _validation.shape("event_shape", event_shape)
        self.validate_args = bool(validate_args)

    def _params_size_arguments(self):
        """The arguments of `params_size` for this layer (TFP's order)."""
        return (self.event_shape,)

    def build(self, input_shape):
        arguments = self._params_size_arguments()
        size = self.params_size(*arguments)
        last = input_shape[-1] if input_shape else None
        if last is not None and last != size:
            shown = ", ".join(repr(a) for a in arguments)
            raise ValueError(
                f"{type(self).__name__}({shown}) needs inputs whose last axis has "
                f"params_size = {size} values, got input shape {tuple(input_shape)}; put "
                f"keras.layers.Dense({type(self).__name__}.params_size({shown})) before it."
            )

    def make_distribution(self, params):
        return self.new(params, self.event_shape, self.validate_args)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + self.event_shape

    @staticmethod
    def _size(event_shape):
        return int(math.prod(event_shape))

    def get_config(self):
        config = super().get_config()
        config.update({"event_shape": self.event_shape, "validate_args": self.validate_args})
        return config


class EventSizeDistribution(EventShapeDistribution):
    """An `EventShapeDistribution` over vectors, sized by `event_size` as in TFP
    (`MultivariateNormalTriL`, `OneHotCategorical`).

    Subclasses may raise `min_event_size`.
    """

    min_event_size = 1

    def __init__(self, event_size, convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("event_shape", None)
        size = _validation.size("event_size", event_size)
        _validation.integer("event_size", size, minimum=self.min_event_size)
        super().__init__((size,), convert_to_tensor_fn, validate_args, **kwargs)
        self.event_size = size

    def _params_size_arguments(self):
        return (self.event_size,)

    def get_config(self):
        config = super().get_config()
        config.pop("event_shape")
        config["event_size"] = self.event_size
        return config

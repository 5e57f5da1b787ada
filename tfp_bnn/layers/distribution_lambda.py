"""A layer whose output is a distribution: TFP's `DistributionLambda` in Keras 3."""

import math

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn.distributions.carrier import attach

tfd = tfp.distributions

CONVERT_TO_TENSOR_FNS = ("sample", "mean", "mode")


def check_event_shape(event_shape, argument="event_shape"):
    """`event_shape` as a tuple of positive ints (an int n means (n,))."""
    if isinstance(event_shape, int) and not isinstance(event_shape, bool):
        event_shape = (event_shape,)
    try:
        return tuple(_validation.integer(argument, d) for d in event_shape)
    except (TypeError, ValueError):  # one message for the whole shape
        raise ValueError(f"`{argument}` must be a positive int or a tuple of positive ints, "
                         f"got {event_shape!r}.") from None


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

    Args:
        make_distribution_fn: callable `t -> tfd.Distribution`. Any callable
            works in a running program; to save the model to `.keras` and
            load it with `safe_mode=True`, use a function registered with
            `keras.saving.register_keras_serializable()` (a lambda, as in
            Keras' own `Lambda` layer, loads only with `safe_mode=False`),
            or one of the ready layers (`IndependentNormal`, ...).
        convert_to_tensor_fn: what the output tensor holds: "sample"
            (TFP's default), "mean", "mode", or a registered callable
            `distribution -> tensor`.
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
        if isinstance(convert_to_tensor_fn, str):
            if convert_to_tensor_fn not in CONVERT_TO_TENSOR_FNS:
                raise ValueError(f"`convert_to_tensor_fn` must be one of "
                                 f"{CONVERT_TO_TENSOR_FNS} or a callable, got "
                                 f"{convert_to_tensor_fn!r}.")
        elif not callable(convert_to_tensor_fn):
            raise ValueError("`convert_to_tensor_fn` must be 'sample', 'mean', 'mode' or a "
                             f"callable distribution -> tensor, got {convert_to_tensor_fn!r}.")
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

    def _value(self, distribution):
        fn = self.convert_to_tensor_fn
        if fn == "sample":
            return distribution.sample(seed=noise.next_seed(self.seed_generator))
        if fn == "mean":
            return distribution.mean()
        if fn == "mode":
            return distribution.mode()
        return fn(distribution)

    def call(self, inputs):
        distribution = self.make_distribution(inputs)
        if not hasattr(distribution, "log_prob"):
            raise ValueError(f"{type(self).__name__}'s make_distribution_fn must return a "
                             f"tfd.Distribution, got {type(distribution).__name__}.")
        # A fresh tensor object per call: the distribution is attached to it.
        return attach(tf.identity(self._value(distribution)), distribution)

    def get_config(self):
        config = super().get_config()
        fn = self.convert_to_tensor_fn
        config.update({
            "convert_to_tensor_fn": fn if isinstance(fn, str)
            else keras.saving.serialize_keras_object(fn),
            "seed": self.seed,
        })
        if self.make_distribution_fn is not None:
            config["make_distribution_fn"] = keras.saving.serialize_keras_object(
                self.make_distribution_fn)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
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
        return EventShapeDistribution._size(check_event_shape(event_shape))

    def __init__(self, event_shape=(), convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("make_distribution_fn", None)
        super().__init__(convert_to_tensor_fn=convert_to_tensor_fn, **kwargs)
        self.event_shape = check_event_shape(event_shape)
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
        (size,) = check_event_shape(event_size, "event_size")
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

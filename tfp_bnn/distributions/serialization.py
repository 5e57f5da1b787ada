"""A TFP distribution with constant parameters as a JSON config, and back.

What a layer that holds a fixed distribution (the prior of
`tfp_bnn.layers.KLDivergenceRegularizer`, say) writes into its Keras
config. A distribution is its class name in `tfp.distributions` and its
constructor arguments (`distribution.parameters`): numbers, strings,
booleans, constant tensors (as nested lists with their dtype), shapes,
nested distributions (`Independent`, `MixtureSameFamily`, `Sample`, ...)
and bijectors of `tfp.bijectors` (`TransformedDistribution`). Loading looks
the class up in `tfp.distributions` / `tfp.bijectors` only, so a `.keras`
file holding one loads with `safe_mode=True`.

Not representable, and refused with one line naming the argument: a
variable (a trainable prior: its values would be frozen in the file), a
callable (`JointDistributionSequential`'s functions) or a class of your own.
"""

import inspect

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn._substrate import tfb
from tfp_bnn._substrate import tfd
from tfp_bnn._substrate import tfp

_KINDS = {"distribution": (tfd, tfd.Distribution), "bijector": (tfb, tfb.Bijector)}


class _Unrepresentable(ValueError):
    pass


def _public_class(obj, kind):
    """The public class of `obj` in its TFP module (TFP's non-composite twins map to it)."""
    module, base = _KINDS[kind]
    name = type(obj).__name__.lstrip("_")
    cls = getattr(module, name, None)
    if isinstance(cls, type) and issubclass(cls, base) and type(obj) in cls.__mro__:
        return name
    raise _Unrepresentable(f"{type(obj).__name__} is not a tfp.{kind}s class")


def _value_config(value):
    # NumPy scalars first: np.float64 is a Python float, whose dtype JSON would lose.
    if value is None or (isinstance(value, (bool, int, float, str))
                         and not isinstance(value, np.generic)):
        return value
    if isinstance(value, tfd.Distribution):
        return _object_config(value, "distribution")
    if isinstance(value, tfb.Bijector):
        return _object_config(value, "bijector")
    if isinstance(value, (list, tuple)):
        return [_value_config(v) for v in value]
    if isinstance(value, tf.TensorShape) or (hasattr(value, "as_list")
                                             and not keras.ops.is_tensor(value)):
        return value.as_list()  # TensorFlow's TensorShape, or the JAX substrate's
    if isinstance(value, (tf.DType, np.dtype)):
        return {"dtype_name": value.name}
    deferred = getattr(getattr(tfp, "util", None), "DeferredTensor", ())
    if isinstance(value, (tf.Variable, keras.Variable, deferred)) or hasattr(value, "assign"):
        raise _Unrepresentable("it holds a variable, whose value a config would freeze")
    if isinstance(value, (np.ndarray, np.generic)) or tf.is_tensor(value) or \
            keras.ops.is_tensor(value):
        try:
            array = np.asarray(tf.get_static_value(value) if tf.is_tensor(value)
                               else _concrete(value))
        except (TypeError, ValueError):
            array = None
        if array is None or array.dtype == object:
            raise _Unrepresentable("it holds a tensor whose value is not known here")
        return {"tensor": array.tolist(), "dtype": array.dtype.name}
    raise _Unrepresentable(f"it holds a {type(value).__name__}")


def _concrete(value):
    """A NumPy array of `value`; a JAX tracer (a value known only when run) raises TypeError."""
    try:
        return np.asarray(value)
    except Exception as error:  # noqa: BLE001 - JAX raises its own ConcretizationTypeError
        raise TypeError(str(error)) from None


def _constant(value, dtype=None):
    """A constant tensor of the backend's (TensorFlow's exactly as before)."""
    if _backend.is_jax():
        return keras.ops.convert_to_tensor(np.asarray(value, dtype))
    return tf.constant(value, dtype)


def _object_config(obj, kind):
    name = _public_class(obj, kind)
    # Arguments left at their default are left out: defaults such as
    # TransformedDistribution's `kwargs_split_fn` are functions.
    defaults = inspect.signature(getattr(_KINDS[kind][0], name).__init__).parameters
    return {kind: name, "parameters": {
        k: _value_config(v) for k, v in sorted(obj.parameters.items())
        if not (k in defaults and defaults[k].default is v)}}


def _from_value_config(value, dtype):
    if isinstance(value, list):
        return [_from_value_config(v, dtype) for v in value]
    if isinstance(value, float) and dtype is not None:
        return _constant(value, tf.as_dtype(dtype).as_numpy_dtype if _backend.is_jax() else dtype)
    if not isinstance(value, dict):
        return value
    if "dtype_name" in value:
        name = value["dtype_name"]
        return np.dtype(tf.as_dtype(name).as_numpy_dtype) if _backend.is_jax() else tf.as_dtype(
            name)
    if "tensor" in value:
        array = np.asarray(value["tensor"], value["dtype"])
        if dtype is not None and np.issubdtype(array.dtype, np.floating):
            array = array.astype(tf.as_dtype(dtype).as_numpy_dtype)
        return _constant(array)
    return _from_object_config(value, dtype)


def _from_object_config(config, dtype):
    kind = "distribution" if "distribution" in config else "bijector"
    module, base = _KINDS[kind]
    cls = getattr(module, str(config[kind]), None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{config[kind]!r} is not a tfp.{kind}s class.")
    return cls(**{k: _from_value_config(v, dtype) for k, v in config["parameters"].items()})


def serialize_distribution(distribution, argument="distribution"):
    """The JSON config of `distribution`, checked to rebuild it.

    Args:
        distribution: a `tfd.Distribution` with constant parameters.
        argument: the argument's name, for the error message.

    Returns:
        A dict of plain Python values.

    Raises:
        ValueError: naming `argument` if the distribution holds what a
            config cannot represent (a variable, a callable, a class of
            your own), or does not rebuild with the same shapes.

    Example:
    >>> prior = tfd.Independent(tfd.Normal(tf.zeros(2), 1.0), reinterpreted_batch_ndims=1)
    >>> config = serialize_distribution(prior)
    >>> config["distribution"], config["parameters"]["distribution"]["distribution"]
    ('Independent', 'Normal')
    >>> deserialize_distribution(config).event_shape
    TensorShape([2])
    """
    failure = None
    try:
        config = _object_config(distribution, "distribution")
        rebuilt = deserialize_distribution(config)
        if (type(rebuilt) is not type(distribution) or rebuilt.dtype != distribution.dtype
                or rebuilt.batch_shape != distribution.batch_shape
                or rebuilt.event_shape != distribution.event_shape):
            failure = "it does not rebuild from its parameters"
    except _Unrepresentable as error:
        failure = str(error)
    except (TypeError, ValueError) as error:
        failure = f"it does not rebuild from its parameters ({error})"
    if failure is not None:
        raise ValueError(
            f"`{argument}` must be a tfp.distributions distribution with constant parameters "
            f"so that it can be saved in the config; {type(distribution).__name__}: {failure}."
        )
    return config


def deserialize_distribution(config, dtype=None):
    """The distribution `serialize_distribution` made `config` of.

    Args:
        config: the dict `serialize_distribution` returned.
        dtype: None to rebuild as saved, or a float dtype: every float
            parameter is then cast to it (a float32 prior for a float64 or
            mixed-precision model).

    Returns:
        A `tfd.Distribution`.

    Example:
    >>> config = serialize_distribution(tfd.Normal(0.0, 2.0))
    >>> deserialize_distribution(config, dtype="float64").dtype
    tf.float64
    """
    return _from_object_config(config, dtype)

"""Attaching a `tfd.Distribution` to the value a distribution layer returns.

On TensorFlow the layer's output tensor carries the distribution as an
attribute and forwards its methods (`attach`). On JAX an array or tracer
takes no attribute (and a JAX array has a `.mean()` of its own), so:

- inside Keras' steps (`fit`, `evaluate`, `predict`: a stateless call,
  usually jit-compiled) the layer returns its value, and the distribution
  is kept in a table keyed by that value object, dropped when the object is
  garbage collected, as Keras keeps the masks of JAX arrays. Keras hands the
  loss that same object (its `Loss` converts `y_pred` to the loss' dtype,
  which returns the object itself when the dtypes agree), so
  `distribution_of(y_pred)` finds it; the array also forwards the
  `FORWARDED_METHODS` it lacks (all but `mean`), so TFP's lambda loss works;
- in an eager call (`model(x)`) the layer returns the distribution of TFP's
  JAX substrate itself, with its value attached (`value_of`).
"""

import weakref

import keras

from tfp_bnn import _backend
from tfp_bnn import _keras_internals
from tfp_bnn import _tf
from tfp_bnn._tf import tf
from tfp_bnn._substrate import tfd as substrate_tfd

# The methods a carrying tensor forwards to its distribution: what TFP code
# calls on a model's output (`rv_y.log_prob(y)`, `yhat.mean()`, ...). None of
# them is a `tf.Tensor` attribute, so nothing of the tensor is shadowed.
FORWARDED_METHODS = (
    "cdf", "covariance", "entropy", "log_cdf", "log_prob", "log_survival_function", "mean",
    "mode", "prob", "quantile", "sample", "stddev", "survival_function", "variance",
)

# Of those, the ones that take a value: it is cast to the distribution's
# floating dtype, as Keras hands a loss targets in the loss' dtype (floatx).
_VALUE_METHODS = frozenset(("cdf", "log_cdf", "log_prob", "log_survival_function", "prob",
                            "survival_function"))

_ATTRIBUTE = "_tfp_distribution"  # TFP's own name for it, kept for familiarity
# On JAX, the value a distribution returned eagerly carries (see `value_of`).
_VALUE_ATTRIBUTE = "_tfp_bnn_value"
# The distribution classes a layer's output may be: TFP's on the active backend.
DISTRIBUTION_TYPES = (substrate_tfd.Distribution,)

# On JAX: id(value) -> the distribution it carries, while the value lives.
_CARRIED = {}

# Said when an eager tensor lacks the distribution (see _getattr_through_casts).
_EAGER_CAST = (
    "If it is a tfp_bnn distribution layer's output that Keras cast to the loss' dtype "
    "(floatx), run eagerly the cast kept no link to the distribution: compile without "
    "run_eagerly=True, or give the distribution layer the loss' dtype.")

# Said on JAX when a tensor lacks the distribution.
_JAX_CAST = (
    "On the JAX backend the distribution is found on the very array the layer returned, "
    "which Keras hands the loss unless it casts or reshapes it: give the distribution layer "
    "the loss' dtype and targets shaped like one sample, or use "
    "tfp_bnn.losses.NegativeLogLikelihood().")

# Ops that Keras may put between a layer's output and the loss (dtype casts,
# rank alignment) and that do not change which distribution the values are of.
_TRANSPARENT_OPS = ("Cast", "Identity", "ExpandDims", "Squeeze", "Reshape")


def attach(value, distribution):
    """Makes `value` (a tensor) carry `distribution`; returns `value`.

    What a distribution layer does to the tensor it returns: the tensor
    keeps its values (a sample, or the mean) for Keras, and gains the
    distribution and its methods (`FORWARDED_METHODS`: `log_prob`, `mean`,
    `stddev`, ...) for the loss and the user, as TFP's layers' outputs do.

    Args:
        value: an eager or symbolic `tf.Tensor` (on JAX an array or
            tracer), usually a sample of `distribution`.
        distribution: the `tfd.Distribution` to attach (of the backend's
            TFP substrate).

    Returns:
        `value` itself, changed in place (on JAX, registered as carrying
        `distribution`).

    Example:
    >>> normal = tfp.distributions.Normal(loc=[0.0, 1.0], scale=1.0)
    >>> value = attach(normal.mean(), normal)
    >>> value.stddev().numpy()
    array([1., 1.], dtype=float32)
    >>> distribution_of(value) is normal
    True
    """
    if _backend.is_jax():
        key = id(value)
        _CARRIED[key] = distribution
        weakref.finalize(value, _CARRIED.pop, key, None)
        return value
    setattr(value, _ATTRIBUTE, distribution)
    for name in FORWARDED_METHODS:
        setattr(value, name, _forwarded(distribution, name))
    return value


def _forwarded(distribution, name):
    """`distribution.<name>`; for a method taking a value, one that casts a floating value to
    the distribution's floating dtype (a float64 head gets float32 targets from Keras)."""
    method = getattr(distribution, name)
    dtype = distribution.dtype
    if name not in _VALUE_METHODS or not _is_float(dtype):
        return method

    def cast_value(value, *args, **kwargs):
        if (keras.ops.is_tensor(value) and _is_float(value.dtype)
                and keras.backend.standardize_dtype(value.dtype)
                != keras.backend.standardize_dtype(dtype)):
            value = keras.ops.cast(value, dtype)
        return method(value, *args, **kwargs)

    cast_value.__doc__ = method.__doc__
    return cast_value


def _is_float(dtype):
    return dtype is not None and keras.backend.is_float_dtype(
        keras.backend.standardize_dtype(dtype))


def with_value(distribution, value):
    """`distribution`, holding `value` for `value_of` (what an eager JAX layer returns).

    `value` may be a function of no arguments computing it: drawn only when
    asked for, as an eager sample costs a JAX program per operation.
    """
    setattr(distribution, _VALUE_ATTRIBUTE, value)
    return distribution


def value_of(output):
    """The tensor a distribution layer's output holds: its sample (or mean, ...).

    On TensorFlow, and inside Keras' steps on JAX, the output is that
    tensor; an eager call on JAX returns the distribution, whose value the
    layer attached to it.

    Args:
        output: a distribution layer's output, or any tensor.

    Returns:
        The tensor (`output` itself unless it is a distribution).

    Example:
    >>> head = tfp_bnn.layers.IndependentNormal(1, convert_to_tensor_fn="mean")
    >>> value_of(head(np.zeros((2, 2), "float32"))).shape
    TensorShape([2, 1])
    """
    if isinstance(output, DISTRIBUTION_TYPES):
        value = getattr(output, _VALUE_ATTRIBUTE, None)
        if value is None:
            raise ValueError(f"This {type(output).__name__} is no tfp_bnn distribution "
                             "layer's output: it holds no value.")
        if callable(value):
            value = value()
            setattr(output, _VALUE_ATTRIBUTE, value)
        return value
    return output


class _ShapeStandIn:
    """What a stand-in tensor of Keras' JAX loss build carries instead of a distribution.

    Keras' JAX trainer builds the loss' state once, before the compiled
    steps, by calling it on stand-in tensors shaped like the model's outputs
    (inside a `SymbolicScope`): no layer made them, so no distribution goes
    with them. There only the shape of the loss matters: every forwarded
    method gives zeros, one per example.
    """

    def __init__(self, value):
        self.dtype = value.dtype if _is_float(value.dtype) else "float32"
        self._shape = tuple(value.shape[:1])

    def __getattr__(self, name):
        if name not in _JAX_FORWARDED:
            raise AttributeError(name)
        return lambda *args, **kwargs: keras.ops.zeros(self._shape, self.dtype)


def _find_or_stand_in(tensor):
    """`_find(tensor)`; on JAX, in Keras' loss build, a `_ShapeStandIn` for any tensor."""
    found = _find(tensor)
    if (found is None and _backend.is_jax() and keras.ops.is_tensor(tensor)
            and _keras_internals.in_symbolic_scope()):
        return _ShapeStandIn(tensor)
    return found


def _find(tensor, depth=8):
    if isinstance(tensor, DISTRIBUTION_TYPES):
        return tensor
    if _backend.is_jax():
        return _CARRIED.get(id(tensor))
    found = getattr(tensor, _ATTRIBUTE, None)
    if found is not None or depth == 0:
        return found
    op = getattr(tensor, "op", None)  # graph tensors only
    if op is None or getattr(op, "type", None) not in _TRANSPARENT_OPS or not op.inputs:
        return None
    return _find(op.inputs[0], depth - 1)


def carries_distribution(tensor):
    """True if `tensor` is (a cast or reshape of) a distribution layer's output.

    Args:
        tensor: any value; tensors made by casting, squeezing or reshaping
            a carrying tensor in a TensorFlow graph count as carrying, and a
            distribution carries itself.

    Returns:
        A bool; False (never an error) for anything else.

    Example:
    >>> layer = tfp_bnn.layers.IndependentNormal(1)
    >>> output = layer(np.zeros((2, 2), "float32"))
    >>> carries_distribution(output), carries_distribution(output + 1.0)
    (True, False)
    """
    try:
        return _find(tensor) is not None
    except (AttributeError, TypeError, ValueError):
        return False


def distribution_of(tensor):
    """The `tfd.Distribution` a distribution layer's output tensor carries.

    Args:
        tensor: the output of a tfp_bnn distribution layer
            (`tfp_bnn.layers.DistributionLambda`, `IndependentNormal`, ...),
            or a cast / reshape of it that Keras made before a loss in a
            TensorFlow graph; a distribution is returned as is (what an eager
            call returns on JAX).

    Returns:
        The distribution.

    Raises:
        ValueError: if the tensor carries none (it is not a distribution
            layer's output, or an operation after the layer made a new
            tensor).

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
    ...                           tfp_bnn.layers.IndependentNormal(1)])
    >>> yhat = model(np.zeros((4, 3), "float32"))
    >>> tfp_bnn.distributions.distribution_of(yhat).stddev().shape
    TensorShape([4, 1])
    """
    known = (_tf.is_tensor(tensor) or keras.ops.is_tensor(tensor)
             or isinstance(tensor, DISTRIBUTION_TYPES) or hasattr(tensor, _ATTRIBUTE))
    distribution = _find_or_stand_in(tensor) if known else None
    if distribution is None:
        raise ValueError(
            "This tensor carries no distribution: it must be the output of a tfp_bnn "
            "distribution layer (tfp_bnn.layers.DistributionLambda, IndependentNormal, "
            "...) with no layer or operation after it; got "
            f"{type(tensor).__name__} of shape {getattr(tensor, 'shape', None)}."
            + (f" {_EAGER_CAST}" if _tf.is_tensor(tensor) and tf.executing_eagerly() else "")
            + (f" {_JAX_CAST}" if _backend.is_jax() and keras.ops.is_tensor(tensor) else "")
        )
    return distribution


# Keras casts what reaches a loss to the loss' dtype (floatx): the output of a
# float64 or float16 head becomes a new tensor, a Cast of the carrying one,
# without its attributes, and TFP's `lambda y, rv_y: -rv_y.log_prob(y)` would
# fail with "'SymbolicTensor' object has no attribute 'log_prob'". In a graph
# (`fit`, `evaluate` and `predict` trace one) the cast's input is reachable:
# `tf.Tensor.__getattr__`, which Python calls only for attributes a tensor
# does not have, finds the forwarded methods there. Every other attribute,
# and every tensor not made from a carrying one, gets TensorFlow's own
# `__getattr__` unchanged. An eager cast (run_eagerly=True) keeps no link to
# its input: there `tfp_bnn.losses.NegativeLogLikelihood()` cannot find the
# distribution either, and the head's dtype must be the loss' dtype.
_FORWARDED = frozenset(FORWARDED_METHODS)
# On JAX also the methods of TFP's VariationalGaussianProcess that its layer's
# output forwards (`tfp_bnn.layers.VariationalGaussianProcess`; on TensorFlow the
# layer sets them on its output tensor itself): a JAX array takes no attribute.
_JAX_FORWARDED = _FORWARDED | {"variational_loss", "surrogate_posterior_kl_divergence_prior"}
_tensorflow_getattr = None  # TensorFlow's own, saved by `_patch_tensorflow_tensors`


def _getattr_through_casts(tensor, name):
    if name in _FORWARDED:
        try:
            distribution = _find(tensor)
        except (AttributeError, TypeError, ValueError):
            distribution = None
        if distribution is not None:
            return _forwarded(distribution, name)
        if tf.executing_eagerly() and tensor.dtype.is_floating:
            raise AttributeError(
                f"'{type(tensor).__name__}' object has no attribute '{name}'. {_EAGER_CAST}")
    return _tensorflow_getattr(tensor, name)


def _patch_tensorflow_tensors():
    global _tensorflow_getattr
    _tensorflow_getattr = tf.Tensor.__getattr__
    tf.Tensor.__getattr__ = _getattr_through_casts


def _patch_jax_arrays():
    """TFP's `rv_y.log_prob(y)` on the array a distribution layer returned in a JAX step.

    `__getattr__` runs only for attributes an array lacks: on a tracer (a
    compiled step) and on a concrete array (`run_eagerly=True`), the
    forwarded methods it does not have (all but `mean`) are found in the
    table of carried distributions, or an error says what to do; every
    other attribute is JAX's own (a concrete array had no `__getattr__`).
    """
    import jax  # noqa: PLC0415 - the JAX backend imported it already

    tracer_getattr = jax.core.Tracer.__getattr__

    def missing(value, name):
        return AttributeError(f"'{type(value).__name__}' object has no attribute '{name}'. "
                              f"{_JAX_CAST}")

    def tracer_carried(value, name):
        if name in _JAX_FORWARDED:
            distribution = _find_or_stand_in(value)
            if distribution is None:
                raise missing(value, name)
            return getattr(distribution, name) if isinstance(
                distribution, _ShapeStandIn) else _forwarded(distribution, name)
        return tracer_getattr(value, name)

    def array_carried(value, name):
        distribution = _CARRIED.get(id(value)) if name in _JAX_FORWARDED else None
        if distribution is None:
            if name in _JAX_FORWARDED:
                raise missing(value, name)
            raise AttributeError(f"'{type(value).__name__}' object has no attribute '{name}'")
        return _forwarded(distribution, name)

    jax.core.Tracer.__getattr__ = tracer_carried
    jax.Array.__getattr__ = array_carried


# Each backend's arrays only: on JAX, tfp_bnn runs without TensorFlow.
if _backend.is_jax():
    _patch_jax_arrays()
else:
    _patch_tensorflow_tensors()

"""Attaching a `tfd.Distribution` to the tensor a distribution layer returns."""

from tfp_bnn import _backend
from tfp_bnn._tf import tf

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

# Said when an eager tensor lacks the distribution (see _getattr_through_casts).
_EAGER_CAST = (
    "If it is a tfp_bnn distribution layer's output that Keras cast to the loss' dtype "
    "(floatx), run eagerly the cast kept no link to the distribution: compile without "
    "run_eagerly=True, or give the distribution layer the loss' dtype.")

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
        value: an eager or symbolic `tf.Tensor`, usually a sample of
            `distribution`.
        distribution: the `tfd.Distribution` to attach.

    Returns:
        `value` itself, changed in place.

    Example:
    >>> normal = tfp.distributions.Normal(loc=[0.0, 1.0], scale=1.0)
    >>> value = attach(normal.mean(), normal)
    >>> value.stddev().numpy()
    array([1., 1.], dtype=float32)
    >>> distribution_of(value) is normal
    True
    """
    setattr(value, _ATTRIBUTE, distribution)
    for name in FORWARDED_METHODS:
        setattr(value, name, _forwarded(distribution, name))
    return value


def _forwarded(distribution, name):
    """`distribution.<name>`; for a method taking a value, one that casts a floating value to
    the distribution's floating dtype (a float64 head gets float32 targets from Keras)."""
    method = getattr(distribution, name)
    dtype = distribution.dtype
    if name not in _VALUE_METHODS or dtype is None or not tf.as_dtype(dtype).is_floating:
        return method

    def cast_value(value, *args, **kwargs):
        if tf.is_tensor(value) and value.dtype.is_floating and value.dtype != dtype:
            value = tf.cast(value, dtype)
        return method(value, *args, **kwargs)

    cast_value.__doc__ = method.__doc__
    return cast_value


def _find(tensor, depth=8):
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
            a carrying tensor in a graph count as carrying.

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
            or a cast / reshape of it that Keras made before a loss.

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
    distribution = _find(tensor) if tf.is_tensor(tensor) or hasattr(tensor, _ATTRIBUTE) else None
    if distribution is None:
        raise ValueError(
            "This tensor carries no distribution: it must be the output of a tfp_bnn "
            "distribution layer (tfp_bnn.layers.DistributionLambda, IndependentNormal, "
            "...) with no layer or operation after it; got "
            f"{type(tensor).__name__} of shape {getattr(tensor, 'shape', None)}."
            + (f" {_EAGER_CAST}" if tf.is_tensor(tensor) and tf.executing_eagerly() else "")
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
_tensorflow_getattr = None  # TensorFlow's own, saved by `_install`


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


def _install():
    global _tensorflow_getattr
    _tensorflow_getattr = tf.Tensor.__getattr__
    tf.Tensor.__getattr__ = _getattr_through_casts


# Keras' JAX backend computes with JAX arrays, and tfp_bnn imports there
# without TensorFlow: the TensorFlow tensors' lookup is only patched where
# they are what Keras computes with.
if not _backend.is_jax():
    _install()

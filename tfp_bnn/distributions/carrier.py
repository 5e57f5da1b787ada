"""Attaching a `tfd.Distribution` to the tensor a distribution layer returns."""

import tensorflow as tf

# The methods a carrying tensor forwards to its distribution: what TFP code
# calls on a model's output (`rv_y.log_prob(y)`, `yhat.mean()`, ...). None of
# them is a `tf.Tensor` attribute, so nothing of the tensor is shadowed.
FORWARDED_METHODS = (
    "cdf", "covariance", "entropy", "log_cdf", "log_prob", "log_survival_function", "mean",
    "mode", "prob", "quantile", "sample", "stddev", "survival_function", "variance",
)

_ATTRIBUTE = "_tfp_distribution"  # TFP's own name for it, kept for familiarity

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
        setattr(value, name, getattr(distribution, name))
    return value


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
        )
    return distribution

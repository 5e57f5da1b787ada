"""Independent Bernoulli output distribution (TFP's `IndependentBernoulli`)."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import independent


def reshaped(params, event_shape):
    """`params` [..., prod(event_shape)] reshaped to batch + event shape."""
    params = keras.ops.convert_to_tensor(params)
    return keras.ops.reshape(params, tuple(keras.ops.shape(params)[:-1]) + tuple(event_shape))


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentBernoulli(EventShapeDistribution):
    """Independent binary outputs with logits from the input.

    Keras 3 counterpart of `tfp.layers.IndependentBernoulli`: the input's
    last axis holds prod(event_shape) logits. Samples are in the layer's
    float dtype (so Keras can pass them to a loss unchanged).

    Args:
        event_shape: int or tuple, the shape of one output (default ()).
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)] of logits.

    Returns:
        Tensor [..., *event_shape] of 0/1 values carrying the distribution.

    Example:
    >>> head = IndependentBernoulli(3)   # after keras.layers.Dense(3)
    >>> y = head(np.zeros((2, 3), "float32"))   # logits 0: p = 0.5
    >>> y.shape, y.mean().numpy()[0]
    (TensorShape([2, 3]), array([0.5, 0.5, 0.5], dtype=float32))
    """

    @staticmethod
    def new(params, event_shape=(), validate_args=False):
        event_shape = _validation.shape("event_shape", event_shape)
        logits = reshaped(params, event_shape)
        return independent(
            tfd.Bernoulli(logits=logits, dtype=logits.dtype, validate_args=validate_args),
            event_shape, validate_args)

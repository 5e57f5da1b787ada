"""Independent Bernoulli output distribution (TFP's `IndependentBernoulli`)."""

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.layers.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution_lambda import check_event_shape
from tfp_bnn.layers.distribution_lambda import independent

tfd = tfp.distributions


def reshaped(params, event_shape):
    """`params` [..., prod(event_shape)] reshaped to batch + event shape."""
    params = tf.convert_to_tensor(params)
    shape = tf.concat([tf.shape(params)[:-1], tf.constant(event_shape, tf.int32)], 0)
    return tf.reshape(params, shape)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentBernoulli(EventShapeDistribution):
    """Independent binary outputs with logits from the input.

    Keras 3 counterpart of `tfp.layers.IndependentBernoulli`: the input's
    last axis holds prod(event_shape) logits. Samples are in the layer's
    float dtype (so Keras can pass them to a loss unchanged).

    Args:
        event_shape, convert_to_tensor_fn, validate_args, seed: as in
            `IndependentNormal`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)] of logits.

    Returns:
        Tensor [..., *event_shape] of 0/1 values carrying the distribution.

    Example:
    >>> head = IndependentBernoulli(3)   # after keras.layers.Dense(3)
    """

    @staticmethod
    def new(params, event_shape=(), validate_args=False):
        event_shape = check_event_shape(event_shape)
        logits = reshaped(params, event_shape)
        return independent(
            tfd.Bernoulli(logits=logits, dtype=logits.dtype, validate_args=validate_args),
            event_shape, validate_args)

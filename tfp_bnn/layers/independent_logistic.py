"""Independent Logistic output distribution (TFP's `IndependentLogistic`)."""

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.layers.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution_lambda import check_event_shape
from tfp_bnn.layers.independent_normal import reshaped_halves

tfd = tfp.distributions


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentLogistic(EventShapeDistribution):
    """Logistic distribution with independent outputs (heavier tails than a Normal).

    Keras 3 counterpart of `tfp.layers.IndependentLogistic`: the input's
    last axis holds 2 * prod(event_shape) values, locations then scales
    through softplus.

    Args:
        event_shape, convert_to_tensor_fn, validate_args, seed: as in
            `IndependentNormal`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying the Independent Logistic.

    Example:
    >>> head = IndependentLogistic(1)   # after keras.layers.Dense(2)
    """

    @staticmethod
    def params_size(event_shape=()):
        return 2 * EventShapeDistribution._size(check_event_shape(event_shape))

    @staticmethod
    def new(params, event_shape=(), validate_args=False):
        event_shape = check_event_shape(event_shape)
        loc, scale = reshaped_halves(params, event_shape)
        return tfd.Independent(
            tfd.Logistic(loc=loc, scale=tf.math.softplus(scale), validate_args=validate_args),
            reinterpreted_batch_ndims=len(event_shape), validate_args=validate_args)

"""Multivariate Normal output with a full covariance (TFP's `MultivariateNormalTriL`)."""

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.layers.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution_lambda import check_event_shape

tfd = tfp.distributions
tfb = tfp.bijectors


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MultivariateNormalTriL(EventShapeDistribution):
    """Correlated real outputs: a Normal with a learned Cholesky factor per input.

    Keras 3 counterpart of `tfp.layers.MultivariateNormalTriL`: the input's
    last axis holds d locations and d(d+1)/2 entries of the scale's lower
    triangle, filled by `tfb.FillScaleTriL` (softplus diagonal + 1e-5), as
    in TFP.

    Args:
        event_size: d, the number of outputs.
        convert_to_tensor_fn, validate_args, seed: as in `IndependentNormal`.

    Call arguments:
        inputs: tensor [..., d + d(d+1)/2].

    Returns:
        Tensor [..., d] carrying `tfd.MultivariateNormalTriL`.

    Example:
    >>> head = MultivariateNormalTriL(3)   # after Dense(MultivariateNormalTriL.params_size(3))
    """

    def __init__(self, event_size, convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("event_shape", None)
        (size,) = check_event_shape(event_size, "event_size")
        super().__init__((size,), convert_to_tensor_fn, validate_args, **kwargs)
        self.event_size = size

    @staticmethod
    def params_size(event_size):
        (size,) = check_event_shape(event_size, "event_size")
        return size + size * (size + 1) // 2

    @staticmethod
    def new(params, event_size, validate_args=False):
        (size,) = check_event_shape(event_size, "event_size")
        params = tf.convert_to_tensor(params)
        fill = tfb.FillScaleTriL(diag_shift=np.array(1e-5, params.dtype.as_numpy_dtype),
                                 validate_args=validate_args)
        return tfd.MultivariateNormalTriL(loc=params[..., :size],
                                          scale_tril=fill(params[..., size:]),
                                          validate_args=validate_args)

    def _params_size_arguments(self):
        return (self.event_size,)

    def get_config(self):
        config = super().get_config()
        config.pop("event_shape")
        config["event_size"] = self.event_size
        return config

"""One-hot categorical output distribution (TFP's `OneHotCategorical`)."""

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.layers.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution_lambda import check_event_shape

tfd = tfp.distributions


@keras.saving.register_keras_serializable(package="tfp_bnn")
class OneHotCategorical(EventShapeDistribution):
    """Class labels as one-hot vectors, with logits from the input.

    Keras 3 counterpart of `tfp.layers.OneHotCategorical`: the input's last
    axis holds `event_size` logits; targets are one-hot rows (for integer
    labels use `tfp_bnn.layers.Categorical`). Samples are one-hot rows in the
    layer's float dtype.

    Args:
        event_size: the number of classes K >= 2.
        convert_to_tensor_fn, validate_args, seed: as in `IndependentNormal`.

    Call arguments:
        inputs: tensor [..., K] of logits.

    Returns:
        Tensor [..., K] of one-hot rows carrying `tfd.OneHotCategorical`.

    Example:
    >>> head = OneHotCategorical(10)   # after keras.layers.Dense(10)
    """

    def __init__(self, event_size, convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("event_shape", None)
        (size,) = check_event_shape(event_size, "event_size")
        if size < 2:
            raise ValueError(f"`event_size` must be >= 2 classes, got {event_size!r}.")
        super().__init__((size,), convert_to_tensor_fn, validate_args, **kwargs)
        self.event_size = size

    @staticmethod
    def params_size(event_size):
        (size,) = check_event_shape(event_size, "event_size")
        return size

    @staticmethod
    def new(params, event_size, validate_args=False):
        params = tf.convert_to_tensor(params)
        return tfd.OneHotCategorical(logits=params, dtype=params.dtype,
                                     validate_args=validate_args)

    def _params_size_arguments(self):
        return (self.event_size,)

    def get_config(self):
        config = super().get_config()
        config.pop("event_shape")
        config["event_size"] = self.event_size
        return config

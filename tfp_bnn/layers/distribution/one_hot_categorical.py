"""One-hot categorical output distribution (TFP's `OneHotCategorical`)."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventSizeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import ParamsSize


@keras.saving.register_keras_serializable(package="tfp_bnn")
class OneHotCategorical(EventSizeDistribution):
    """Class labels as one-hot vectors, with logits from the input.

    Keras 3 counterpart of `tfp.layers.OneHotCategorical`: the input's last
    axis holds `event_size` logits; targets are one-hot rows (for integer
    labels use `tfp_bnn.layers.Categorical`). Samples are one-hot rows in the
    layer's float dtype.

    Args:
        event_size: the number of classes K >= 2.
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., K] of logits.

    Returns:
        Tensor [..., K] of one-hot rows carrying `tfd.OneHotCategorical`.

    Example:
    >>> head = OneHotCategorical(10)   # after keras.layers.Dense(10)
    >>> y = head(np.zeros((2, 10), "float32"))
    >>> y.shape, float(y.numpy().sum())   # one 1 per row
    (TensorShape([2, 10]), 2.0)
    """

    min_event_size = 2

    @staticmethod
    def params_size(event_size):
        size = _validation.size("event_size", event_size)
        return ParamsSize(size)

    @staticmethod
    def new(params, event_size, validate_args=False):
        params = keras.ops.convert_to_tensor(params)
        return tfd.OneHotCategorical(logits=params, dtype=params.dtype,
                                     validate_args=validate_args)

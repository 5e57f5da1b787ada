"""Independent Poisson output distribution (TFP's `IndependentPoisson`)."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import independent
from tfp_bnn.layers.distribution.independent_bernoulli import reshaped


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentPoisson(EventShapeDistribution):
    """Independent counts with log-rates from the input.

    Keras 3 counterpart of `tfp.layers.IndependentPoisson`: the input's last
    axis holds prod(event_shape) log-rates (rate = exp(input), as in TFP).

    Args:
        event_shape: int or tuple, the shape of one output (default ()).
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)] of log-rates.

    Returns:
        Tensor [..., *event_shape] of counts carrying the distribution.

    Example:
    >>> head = IndependentPoisson(1)   # after keras.layers.Dense(1)
    >>> y = head(np.log([[2.0], [5.0]]).astype("float32"))   # log-rates
    >>> y.mean().numpy().ravel()
    array([2., 5.], dtype=float32)
    """

    @staticmethod
    def new(params, event_shape=(), validate_args=False):
        event_shape = _validation.shape("event_shape", event_shape)
        return independent(
            tfd.Poisson(log_rate=reshaped(params, event_shape), validate_args=validate_args),
            event_shape, validate_args)

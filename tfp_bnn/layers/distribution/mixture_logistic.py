"""Mixture of Logistics output distribution (TFP's `MixtureLogistic`)."""

import keras

from tfp_bnn.layers.distribution.independent_logistic import IndependentLogistic
from tfp_bnn.layers.distribution.mixture_normal import MixtureNormal


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MixtureLogistic(MixtureNormal):
    """A mixture of independent Logistics (TFP's `MixtureLogistic`).

    As `MixtureNormal` with `IndependentLogistic` components: the input's
    last axis holds `num_components` logits, then 2 * prod(event_shape)
    parameters per component.

    Args:
        num_components: number of mixture components, >= 1.
        event_shape: int or tuple, the shape of one output (default ()).
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., params_size(num_components, event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying `tfd.MixtureSameFamily`.

    Example:
    >>> head = MixtureLogistic(4, 1)   # after Dense(MixtureLogistic.params_size(4, 1))
    >>> head(np.zeros((2, MixtureLogistic.params_size(4, 1)), "float32")).shape
    TensorShape([2, 1])
    """

    component_class = IndependentLogistic

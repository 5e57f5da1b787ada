"""Mixture of Logistics output distribution (TFP's `MixtureLogistic`)."""

import keras

from tfp_bnn.layers.independent_logistic import IndependentLogistic
from tfp_bnn.layers.mixture_normal import MixtureNormal


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MixtureLogistic(MixtureNormal):
    """A mixture of independent Logistics (TFP's `MixtureLogistic`).

    As `MixtureNormal` with `IndependentLogistic` components: the input's
    last axis holds `num_components` logits, then 2 * prod(event_shape)
    parameters per component.

    Args:
        num_components, event_shape, convert_to_tensor_fn, validate_args,
            seed: as in `MixtureNormal`.

    Call arguments:
        inputs: tensor [..., params_size(num_components, event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying `tfd.MixtureSameFamily`.

    Example:
    >>> head = MixtureLogistic(4, 1)   # after Dense(MixtureLogistic.params_size(4, 1))
    """

    component_class = IndependentLogistic

"""Mixture of Normals output distribution (TFP's `MixtureNormal`)."""

import keras

from tfp_bnn.layers.distribution.independent_normal import IndependentNormal
from tfp_bnn.layers.distribution.mixture_same_family import MixtureSameFamily


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MixtureNormal(MixtureSameFamily):
    """A mixture of independent Normals: multimodal real outputs.

    Keras 3 counterpart of `tfp.layers.MixtureNormal`: the input's last axis
    holds `num_components` mixture logits, then for each component the
    2 * prod(event_shape) parameters of an `IndependentNormal`.

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
    >>> head = MixtureNormal(3, 1)   # after Dense(MixtureNormal.params_size(3, 1))
    >>> MixtureNormal.params_size(3, 1)   # 3 logits, 3 locations, 3 scales
    9
    >>> head(np.zeros((2, 9), "float32")).shape
    TensorShape([2, 1])
    """

    component_class = IndependentNormal

    def __init__(self, num_components, event_shape=(), convert_to_tensor_fn="sample",
                 validate_args=False, **kwargs):
        kwargs.pop("component_layer", None)
        component = self.component_class(event_shape, validate_args=validate_args)
        super().__init__(num_components, component, convert_to_tensor_fn, validate_args,
                         **kwargs)

    @classmethod
    def params_size(cls, num_components, event_shape=()):
        return MixtureSameFamily.params_size(
            num_components, cls.component_class.params_size(event_shape))

    def _params_size_arguments(self):
        return (self.num_components, self.event_shape)

    def get_config(self):
        config = super().get_config()
        config.pop("component_layer")
        config["event_shape"] = self.event_shape
        return config

"""A mixture of one distribution family (TFP's `MixtureSameFamily` layer)."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import DistributionLambda
from tfp_bnn.layers.distribution.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import ParamsSize


def _components(num_components):
    components = _validation.size("num_components", num_components)
    return components


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MixtureSameFamily(EventShapeDistribution):
    """A mixture of `num_components` distributions of the component layer's family.

    Keras 3 counterpart of `tfp.layers.MixtureSameFamily`: the input's last
    axis holds `num_components` mixture logits, then for each component the
    parameters the component layer takes (its `params_size`).

    Args:
        num_components: number of mixture components, >= 1.
        component_layer: a tfp_bnn distribution layer of fixed size
            (`IndependentNormal(event_shape)`, `IndependentPoisson(...)`,
            `MultivariateNormalTriL(d)`, ...) giving the family.
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., num_components * (1 + component params_size)].

    Returns:
        Tensor shaped like one sample, carrying `tfd.MixtureSameFamily`.

    Example:
    >>> head = MixtureSameFamily(3, tfp_bnn.layers.IndependentPoisson(1))   # after Dense(6)
    >>> y = head(np.zeros((2, 6), "float32"))   # 3 logits, 3 log-rates
    >>> y.shape, y.mean().numpy().ravel()
    (TensorShape([2, 1]), array([1., 1.], dtype=float32))
    """

    def __init__(self, num_components, component_layer, convert_to_tensor_fn="sample",
                 validate_args=False, **kwargs):
        if isinstance(component_layer, dict):
            component_layer = keras.saving.deserialize_keras_object(component_layer)
        if not isinstance(component_layer, EventShapeDistribution):
            raise ValueError("`component_layer` must be a tfp_bnn distribution layer of fixed "
                             "size (IndependentNormal, IndependentPoisson, ...), got "
                             f"{component_layer!r}.")
        self.num_components = _components(num_components)
        self.component_layer = component_layer
        super().__init__(component_layer.event_shape, convert_to_tensor_fn, validate_args,
                         **kwargs)

    @staticmethod
    def params_size(num_components, component_params_size):
        """Logits plus `component_params_size` values for each of `num_components`.

        Args:
            num_components: number of mixture components, >= 1.
            component_params_size: the component layer's `params_size`.

        Returns:
            num_components * (1 + component_params_size), an int.
        """
        size = _validation.size("component_params_size", component_params_size)
        return ParamsSize(_components(num_components) * (1 + size))

    def _params_size_arguments(self):
        component = self.component_layer
        return (self.num_components,
                component.params_size(*component._params_size_arguments()))

    def make_distribution(self, params):
        return self.new(params, self.num_components, self.component_layer, self.validate_args)

    @staticmethod
    def new(params, num_components, component_layer, validate_args=False):
        """The mixture distribution for `params`, with TFP's signature.

        Args:
            params: tensor [..., K * (1 + p)]: K mixture logits, then the
                components' parameters, p per component.
            num_components: K.
            component_layer: a tfp_bnn distribution layer (TFP passes its
                component layer here) or a callable mapping parameters
                [..., K, p] to the components' distribution (batch shape
                [..., K]).
            validate_args: passed to `tfd.MixtureSameFamily`.

        Returns:
            A `tfd.MixtureSameFamily`.
        """
        num_components = _components(num_components)
        # A layer's call returns a tensor carrying the distribution; the
        # mixture needs the distribution itself.
        make_component = (component_layer.make_distribution
                          if isinstance(component_layer, DistributionLambda)
                          else component_layer)
        params = keras.ops.convert_to_tensor(params)
        shape = tuple(keras.ops.shape(params)[:-1]) + (num_components, -1)
        components = make_component(keras.ops.reshape(params[..., num_components:], shape))
        return tfd.MixtureSameFamily(tfd.Categorical(logits=params[..., :num_components]),
                                     components, validate_args=validate_args)

    def compute_output_shape(self, input_shape):
        return self.component_layer.compute_output_shape(
            tuple(input_shape[:-1]) + (self._params_size_arguments()[1],))

    def get_config(self):
        config = super().get_config()
        config.pop("event_shape")
        config.update({"num_components": self.num_components,
                       "component_layer": keras.saving.serialize_keras_object(
                           self.component_layer)})
        return config

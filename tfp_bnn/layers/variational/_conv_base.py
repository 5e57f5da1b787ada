"""What the variational 1-D, 2-D and 3-D convolution layers share.

`BayesianConvBase` holds the arguments and shapes of `keras.layers.Conv{rank}D`;
`ConvFlipout` and `ConvReparameterization` add the estimator. A public
convolution layer only sets `rank` (and its docstring).
"""

from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers.variational._estimators import flipout_call
from tfp_bnn.layers.variational._estimators import reparameterization_call
from tfp_bnn.layers._shapes import ConvShapes


class BayesianConvBase(ConvShapes, BayesianLayer):
    """A `BayesianLayer` with the arguments and shapes of `keras.layers.Conv{rank}D`.

    Subclasses set the class attribute `rank` (1, 2 or 3 spatial dimensions)
    and say which estimator `_variational_call` uses (see `ConvFlipout`,
    `ConvReparameterization`).
    """

    def build(self, input_shape):
        kernel_shape, bias_shape, _ = self._conv_shapes(input_shape)
        self._build_weights(kernel_shape, bias_shape)

    def _sampled_bias_shape(self, rank, num_samples):
        # Outputs are [S, B, ...]: the per-sample bias goes on the channel axis.
        if self.data_format == "channels_last":
            return super()._sampled_bias_shape(rank, num_samples)
        return [num_samples, 1, -1] + [1] * (rank - 3)


class ConvReparameterization(BayesianConvBase):
    """A convolution whose kernel is sampled once per call (Blundell et al. 2015, sec. 3.2)."""

    def _variational_call(self, inputs, training):
        return reparameterization_call(self, inputs, training)


class ConvFlipout(BayesianConvBase):
    """A convolution with Flipout weight noise (Wen et al., 2018)."""

    requires_location_scale = True

    def _variational_call(self, inputs, training):
        return flipout_call(self, inputs, training, self._flipout_sign_shapes)

    def _flipout_sign_shapes(self, inputs, outputs):
        # One sign per example and channel, shared over positions, so each
        # example sees one whole perturbed kernel (as TFP's Conv flipout).
        if _backend.is_jax():
            # Static under jax.jit: the batch size is known when it traces.
            batch = tuple(inputs.shape[:1])
            return (batch + tuple(self._channel_shape(inputs.shape[self._channel_axis])[1:]),
                    batch + tuple(self._channel_shape(self.filters)[1:]))
        batch = tf.shape(inputs)[:1]
        channels = tf.shape(inputs)[self._channel_axis]
        return (tf.concat([batch, self._channel_shape(channels)[1:]], axis=0),
                tf.concat([batch, self._channel_shape(self.filters)[1:]], axis=0))

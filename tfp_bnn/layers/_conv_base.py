"""Shape handling shared by the variational 1-D, 2-D and 3-D convolution layers."""

import tensorflow as tf

from tfp_bnn.layers.base import BayesianLayer
from tfp_bnn.layers._shapes import ConvShapes
from tfp_bnn.layers._shapes import conv_arguments


class BayesianConvBase(ConvShapes, BayesianLayer):
    """A `BayesianLayer` with the arguments and shapes of `keras.layers.Conv{rank}D`.

    Subclasses set the class attribute `rank` (1, 2 or 3 spatial dimensions)
    and say which estimator `_variational_call` uses.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        data_format=None,
        dilation_rate=1,
        groups=1,
        **kwargs,
    ):
        arguments = conv_arguments(self.rank, filters, kernel_size, strides, padding,
                                   data_format, dilation_rate, groups)
        super().__init__(**kwargs)
        self._set_conv_arguments(arguments)

    def build(self, input_shape):
        kernel_shape, bias_shape, _ = self._conv_shapes(input_shape)
        self._build_weights(kernel_shape, bias_shape)

    def _sampled_bias_shape(self, rank, num_samples):
        # Outputs are [S, B, ...]: the per-sample bias goes on the channel axis.
        if self.data_format == "channels_last":
            return super()._sampled_bias_shape(rank, num_samples)
        return [num_samples, 1, -1] + [1] * (rank - 3)

    def _flipout_sign_shapes(self, inputs, outputs):
        # One sign per example and channel, shared over positions, so each
        # example sees one whole perturbed kernel (as TFP's Conv flipout).
        batch = tf.shape(inputs)[:1]
        channels = tf.shape(inputs)[self._channel_axis]
        return (tf.concat([batch, self._channel_shape(channels)[1:]], axis=0),
                tf.concat([batch, self._channel_shape(self.filters)[1:]], axis=0))

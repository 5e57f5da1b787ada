"""Shape handling shared by the variational 2-D convolution layers."""

import tensorflow as tf

from tfp_bnn.layers.base import BayesianLayer
from tfp_bnn.layers.shapes import Conv2DShapes
from tfp_bnn.layers.shapes import conv2d_arguments


class BayesianConv2DBase(Conv2DShapes, BayesianLayer):
    """A `BayesianLayer` with the arguments and shapes of `keras.layers.Conv2D`."""

    def __init__(
        self,
        filters,
        kernel_size,
        strides=(1, 1),
        padding="valid",
        data_format=None,
        dilation_rate=(1, 1),
        groups=1,
        **kwargs,
    ):
        arguments = conv2d_arguments(filters, kernel_size, strides, padding, data_format,
                                     dilation_rate, groups)
        super().__init__(**kwargs)
        self._set_conv_arguments(arguments)

    def build(self, input_shape):
        kernel_shape, bias_shape, _ = self._conv_shapes(input_shape)
        self._build_weights(kernel_shape, bias_shape)

    def _sampled_bias_shape(self, rank, num_samples):
        if self.data_format == "channels_last":
            return super()._sampled_bias_shape(rank, num_samples)
        return [num_samples, 1, -1, 1, 1]

    def _flipout_sign_shapes(self, inputs, outputs):
        # One sign per example and channel, shared over positions, so each
        # example sees one whole perturbed kernel (as TFP's Conv flipout).
        batch = tf.shape(inputs)[0]
        channels = tf.shape(inputs)[self._channel_axis]
        if self.data_format == "channels_last":
            return tf.stack([batch, 1, 1, channels]), tf.stack([batch, 1, 1, self.filters])
        return tf.stack([batch, channels, 1, 1]), tf.stack([batch, self.filters, 1, 1])

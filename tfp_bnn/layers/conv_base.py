"""Shape handling shared by the variational 2-D convolution layers."""

import keras
import tensorflow as tf
from keras import ops

from tfp_bnn.layers.base import BayesianLayer


def _pair(name, value):
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        value = tuple(value)
    except TypeError:
        value = ()
    if len(value) != 2 or any(
        isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in value
    ):
        raise ValueError(
            f"`{name}` must be a positive int or a tuple of 2 positive ints, got {value!r}."
        )
    return value


def conv_output_length(length, kernel, stride, dilation, padding):
    """Output length of a 1-D convolution (as `keras.layers.Conv2D` computes it)."""
    if length is None:
        return None
    if padding == "same":
        return -(-length // stride)
    effective = dilation * (kernel - 1) + 1
    return max((length - effective) // stride + 1, 0)


class BayesianConv2DBase(BayesianLayer):
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
        if isinstance(filters, bool) or not isinstance(filters, int) or filters <= 0:
            raise ValueError(f"`filters` must be a positive int, got {filters!r}.")
        kernel_size = _pair("kernel_size", kernel_size)
        strides = _pair("strides", strides)
        dilation_rate = _pair("dilation_rate", dilation_rate)
        if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
            raise ValueError(f"`padding` must be 'valid' or 'same', got {padding!r}.")
        if max(strides) > 1 and max(dilation_rate) > 1:
            raise ValueError(
                "`strides` > 1 is not compatible with `dilation_rate` > 1, got "
                f"strides={strides}, dilation_rate={dilation_rate}."
            )
        if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"`groups` must be a positive int, got {groups!r}.")
        if filters % groups:
            raise ValueError(
                f"`filters` ({filters}) must be divisible by `groups` ({groups})."
            )
        if data_format is None:
            data_format = keras.config.image_data_format()
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(
                "`data_format` must be 'channels_last', 'channels_first' or None, "
                f"got {data_format!r}."
            )
        super().__init__(**kwargs)
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding.lower()
        self.data_format = data_format
        self.dilation_rate = dilation_rate
        self.groups = groups
        self.input_spec = keras.layers.InputSpec(ndim=4)
        self._channel_axis = -1 if data_format == "channels_last" else 1

    def build(self, input_shape):
        channels = input_shape[self._channel_axis]
        if channels is None:
            raise ValueError(
                f"{type(self).__name__} needs a known channel dimension, got input "
                f"shape {tuple(input_shape)}."
            )
        if channels % self.groups:
            raise ValueError(
                f"The input channels ({channels}) must be divisible by `groups` "
                f"({self.groups})."
            )
        kernel_shape = self.kernel_size + (channels // self.groups, self.filters)
        self._build_weights(kernel_shape, (self.filters,))
        self.input_spec = keras.layers.InputSpec(
            ndim=4, axes={self._channel_axis: channels}
        )

    def _apply_kernel(self, inputs, kernel):
        return ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=self.padding,
            data_format=self.data_format,
            dilation_rate=self.dilation_rate,
        )

    def _shape_bias(self, bias):
        if self.data_format == "channels_last":
            return bias
        return ops.reshape(bias, (1, self.filters, 1, 1))

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

    def compute_output_shape(self, input_shape):
        if self.data_format == "channels_last":
            spatial = input_shape[1:3]
        else:
            spatial = input_shape[2:4]
        out = tuple(
            conv_output_length(n, k, s, d, self.padding)
            for n, k, s, d in zip(spatial, self.kernel_size, self.strides, self.dilation_rate)
        )
        if self.data_format == "channels_last":
            return (input_shape[0],) + out + (self.filters,)
        return (input_shape[0], self.filters) + out

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "data_format": self.data_format,
                "dilation_rate": self.dilation_rate,
                "groups": self.groups,
            }
        )
        return config

"""Where a channels_first convolution runs: natively, or in channels_last.

TensorFlow's own CPU convolution kernels (Eigen) take channels_last (NHWC)
inputs only. Its oneDNN kernels also take channels_first, but TensorFlow
turns them on only on CPUs with AVX-512 VNNI, BF16 or AMX (and never with
`TF_ENABLE_ONEDNN_OPTS=0`); elsewhere a channels_first convolution fails
with "The Conv2D op currently only supports the NHWC tensor format on the
CPU", in `keras.layers.Conv2D` as well. So without a GPU the layers convolve
in channels_last between two transposes, which gives the same numbers as
Keras' channels_last convolution of the transposed inputs. With a GPU
visible, channels_first runs natively, as cuDNN takes it.

The transposes are not free: on a 2-core x86 CPU a 3x3 convolution of
32 x 16 x 28 x 28 inputs into 32 filters took 1.0 to 2.8 times as long
through them as the channels_last convolution alone (noisy, shared machine),
about what oneDNN's native channels_first took where it runs, and far less
than Keras' Conv3D channels_first, which XLA compiles on CPU.

On the JAX backend every convolution is an XLA convolution, which takes
either layout on any device: channels_first runs as such there.

This module is the one place that decides; the layers call `conv`.
"""

from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend


def native_channels_first() -> bool:
    """Whether channels_first convolutions run as such: on JAX (XLA takes both
    layouts on any device), or with a GPU visible to TensorFlow."""
    if _backend.is_jax():
        return True
    # Visible, not physical: tf.config.set_visible_devices([], "GPU") hides one.
    return bool(tf.config.get_visible_devices("GPU"))


def conv(inputs, kernel, strides, padding, data_format, dilation_rate):
    """`keras.ops.conv` that runs channels_first inputs on any device.

    Args and result as `keras.ops.conv`, for inputs of rank 3 to 5 with a
    static rank; `padding` is "valid" or "same".
    """
    if data_format == "channels_last" or native_channels_first():
        return ops.conv(inputs, kernel, strides=strides, padding=padding,
                        data_format=data_format, dilation_rate=dilation_rate)
    rank = len(inputs.shape) - 2
    to_last = [0] + list(range(2, rank + 2)) + [1]
    to_first = [0, rank + 1] + list(range(1, rank + 1))
    outputs = ops.conv(ops.transpose(inputs, to_last), kernel, strides=strides,
                       padding=padding, data_format="channels_last",
                       dilation_rate=dilation_rate)
    return ops.transpose(outputs, to_first)

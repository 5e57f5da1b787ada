"""The arguments and shapes of Dense and Conv1D/2D/3D, shared by every layer family.

The variational layers (`BayesianDenseBase`, `BayesianConvBase`) and the
node-based layers (`NodeDense`, `NodeConv2D`) differ in where their
randomness lives, not in how a kernel meets the inputs. These mixins hold
that part once: argument validation (errors name the argument), the kernel
shape for given inputs, the matmul / convolution, the output shape and the
config entries. Each layer class lists the mixin before its Keras base.
"""

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.layers.variational import _conv_layout


def set_weight_arguments(layer, activation=None, use_bias=True,
                         kernel_initializer="glorot_uniform", bias_initializer="zeros",
                         kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                         bias_constraint=None):
    """Resolves and sets the kernel/bias arguments `keras.layers.Dense` takes."""
    layer.activation = keras.activations.get(activation)
    layer.use_bias = bool(use_bias)
    layer.kernel_initializer = keras.initializers.get(kernel_initializer)
    layer.bias_initializer = keras.initializers.get(bias_initializer)
    layer.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
    layer.bias_regularizer = keras.regularizers.get(bias_regularizer)
    layer.kernel_constraint = keras.constraints.get(kernel_constraint)
    layer.bias_constraint = keras.constraints.get(bias_constraint)


def weight_arguments_config(layer):
    """The config entries of `set_weight_arguments`, serialized."""
    return {
        "activation": keras.activations.serialize(layer.activation),
        "use_bias": layer.use_bias,
        "kernel_initializer": keras.initializers.serialize(layer.kernel_initializer),
        "bias_initializer": keras.initializers.serialize(layer.bias_initializer),
        "kernel_regularizer": keras.regularizers.serialize(layer.kernel_regularizer),
        "bias_regularizer": keras.regularizers.serialize(layer.bias_regularizer),
        "kernel_constraint": keras.constraints.serialize(layer.kernel_constraint),
        "bias_constraint": keras.constraints.serialize(layer.bias_constraint),
    }


def fix_last_dim(layer, input_shape):
    """The last input dimension, which must be known; pins it in `layer.input_spec`."""
    input_dim = input_shape[-1]
    if input_dim is None:
        raise ValueError(
            f"{type(layer).__name__} needs a known last input dimension, got "
            f"input shape {tuple(input_shape)}."
        )
    layer.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})
    return input_dim


class DenseShapes:
    """`keras.layers.Dense`'s units, kernel shape and output shape.

    Acts on the last axis of inputs of rank >= 2, like `keras.layers.Dense`.
    """

    def __init__(self, units, **kwargs):
        # Checked before the layer family's __init__ runs with the other arguments.
        units = _validation.integer("units", units)
        super().__init__(**kwargs)
        self.units = units
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        # As keras.layers.Dense: acts per position, so a sequence mask passes through.
        self.supports_masking = True

    def _dense_shapes(self, input_shape):
        """(kernel shape, bias shape, input dim) for `input_shape`."""
        input_dim = fix_last_dim(self, input_shape)
        return (input_dim, self.units), (self.units,), input_dim

    def _apply_kernel(self, inputs, kernel):
        return ops.matmul(inputs, kernel)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def _shape_config(self):
        return {"units": self.units}

    def get_config(self):
        # Chains to the layer family's get_config (next in the MRO).
        config = super().get_config()
        config.update(self._shape_config())
        return config


def _int_tuple(name, value, rank):
    """`value` as a tuple of `rank` positive ints (an int is repeated), as Keras takes it."""
    given = value
    if _validation.is_scalar(value) and not isinstance(value, (str, bytes)):
        value = (value,) * rank  # an int, NumPy int or scalar int tensor
    try:
        values = _validation.integers(name, value)
    except ValueError:  # one message for the whole tuple, which names the argument
        values = ()
    if len(values) != rank:
        raise ValueError(f"`{name}` must be a positive int or a tuple of {rank} positive ints, "
                         f"got {given!r}.")
    return values


def conv_output_length(length, kernel, stride, dilation, padding):
    """Output length of a 1-D convolution (as `keras.layers.Conv2D` computes it)."""
    if length is None:
        return None
    if padding in ("same", "causal"):
        # Causal pads d * (k - 1) on the left: ceil(length / stride), like "same".
        return -(-length // stride)
    effective = dilation * (kernel - 1) + 1
    return max((length - effective) // stride + 1, 0)


def conv_arguments(rank, filters, kernel_size, strides=1, padding="valid", data_format=None,
                   dilation_rate=1, groups=1):
    """Validated `keras.layers.Conv{rank}D` arguments as a dict."""
    filters = _validation.integer("filters", filters)
    kernel_size = _int_tuple("kernel_size", kernel_size, rank)
    strides = _int_tuple("strides", strides, rank)
    dilation_rate = _int_tuple("dilation_rate", dilation_rate, rank)
    # As in Keras, only Conv1D pads causally.
    paddings = ("valid", "same", "causal") if rank == 1 else ("valid", "same")
    if not isinstance(padding, str) or padding.lower() not in paddings:
        raise ValueError(
            f"`padding` must be one of {paddings} for a {rank}-D convolution, got {padding!r}."
        )
    if max(strides) > 1 and max(dilation_rate) > 1:
        raise ValueError(
            "`strides` > 1 is not compatible with `dilation_rate` > 1, got "
            f"strides={strides}, dilation_rate={dilation_rate}."
        )
    groups = _validation.integer("groups", groups)
    if filters % groups:
        raise ValueError(f"`filters` ({filters}) must be divisible by `groups` ({groups}).")
    if data_format is None:
        data_format = keras.config.image_data_format()
    _validation.one_of("data_format", data_format, ("channels_last", "channels_first"))
    return {"filters": filters, "kernel_size": kernel_size, "strides": strides,
            "padding": padding.lower(), "data_format": data_format,
            "dilation_rate": dilation_rate, "groups": groups}


class ConvShapes:
    """`keras.layers.Conv{1,2,3}D`'s arguments, kernel shape, convolution and output shape.

    The number of spatial dimensions is the class attribute `rank`.
    """

    rank = None

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, **kwargs):
        arguments = conv_arguments(self.rank, filters, kernel_size, strides, padding,
                                   data_format, dilation_rate, groups)
        super().__init__(**kwargs)
        self._set_conv_arguments(arguments)

    def _set_conv_arguments(self, arguments):
        for name, value in arguments.items():
            setattr(self, name, value)
        self._conv_names = tuple(arguments)
        self._channel_axis = -1 if self.data_format == "channels_last" else 1
        self.input_spec = keras.layers.InputSpec(ndim=self.rank + 2)

    def _conv_shapes(self, input_shape):
        """(kernel shape, bias shape, input channels) for `input_shape`."""
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
        self.input_spec = keras.layers.InputSpec(
            ndim=self.rank + 2, axes={self._channel_axis: channels}
        )
        kernel_shape = self.kernel_size + (channels // self.groups, self.filters)
        return kernel_shape, (self.filters,), channels

    def _apply_kernel(self, inputs, kernel):
        padding = self.padding
        if padding == "causal":
            # Left-pad the time axis so output t sees inputs <= t only.
            left = self.dilation_rate[0] * (self.kernel_size[0] - 1)
            time_axis = 1 if self.data_format == "channels_last" else 2
            pads = [[0, 0], [0, 0], [0, 0]]
            pads[time_axis] = [left, 0]
            inputs = ops.pad(inputs, pads)
            padding = "valid"
        # channels_first runs on any CPU, where TensorFlow may have no NCHW kernel.
        return _conv_layout.conv(inputs, kernel, self.strides, padding, self.data_format,
                                 self.dilation_rate)

    def _channel_shape(self, channels):
        """Shape of a per-channel tensor that broadcasts over batch and positions."""
        if self.data_format == "channels_last":
            return [1] * (self.rank + 1) + [channels]
        return [1, channels] + [1] * self.rank

    def _shape_bias(self, bias):
        if self.data_format == "channels_last":
            return bias
        return ops.reshape(bias, self._channel_shape(self.filters))

    def compute_output_shape(self, input_shape):
        if self.data_format == "channels_last":
            spatial = input_shape[1:1 + self.rank]
        else:
            spatial = input_shape[2:2 + self.rank]
        out = tuple(
            conv_output_length(n, k, s, d, self.padding)
            for n, k, s, d in zip(spatial, self.kernel_size, self.strides, self.dilation_rate)
        )
        if self.data_format == "channels_last":
            return (input_shape[0],) + out + (self.filters,)
        return (input_shape[0], self.filters) + out

    def _shape_config(self):
        return {name: getattr(self, name) for name in self._conv_names}

    def get_config(self):
        # Chains to the layer family's get_config (next in the MRO).
        config = super().get_config()
        config.update(self._shape_config())
        return config


class Conv2DShapes(ConvShapes):
    """`ConvShapes` of `keras.layers.Conv2D` (two spatial dimensions)."""

    rank = 2

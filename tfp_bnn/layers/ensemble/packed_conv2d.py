"""2-D convolution of a Packed-Ensemble (Laurent et al. 2023)."""

import keras
from keras import ops

from tfp_bnn.layers._shapes import conv_arguments
from tfp_bnn.layers._shapes import conv_output_length
from tfp_bnn.layers.ensemble._packed import PackedLayer
from tfp_bnn.layers.variational import _conv_layout


@keras.saving.register_keras_serializable(package="tfp_bnn")
class PackedConv2D(PackedLayer):
    """2-D convolution of M packed members: a grouped convolution of M * gamma groups.

    Output channel block g is the convolution of input channel block g with kernel block g
    (Laurent et al. 2023, sec. 3); member m owns groups m * gamma .. m * gamma + gamma - 1
    (see `tfp_bnn.layers.ensemble._packed` and `PackedDense`, which this layer follows for
    `first`, `last`, `tfp_bnn.layers.PackedOutput`, `MemberLoss` and `tfp_bnn.predict`:
    every sample computes all M members, so a prediction costs M times a single pass per
    sample; use `num_samples=M`).

    The groups run as G ungrouped convolutions of their channel blocks, concatenated, not
    as one grouped convolution (`keras.layers.Conv2D(groups=G)`): TensorFlow's own CPU
    kernels without oneDNN (`TF_ENABLE_ONEDNN_OPTS=0`, or a CPU on which TensorFlow leaves
    it off) fail on a grouped convolution once Grappler fuses it with a following
    `tf.nn.bias_add` ("Fused conv implementation does not support grouped convolutions",
    TensorFlow 2.21), so Keras' TensorFlow backend runs every grouped `ops.conv` as a
    nested XLA-compiled function, which trained a 4-member packed CNN (three 3x3 layers,
    16x16 inputs) 30 times slower per epoch on CPU than the split groups (12.7 s against
    0.42 s, TensorFlow 2.21, 2 cores). Split, the groups are plain convolutions that every
    backend, device and kernel library runs, with the grouped convolution's operation count
    (one convolution with a block-diagonal masked kernel would also run everywhere, at G
    times the operations). The kernel has the layout of `keras.layers.Conv2D(groups=G)`'s,
    kernel_size + (in channels / G, output channels).

    Args:
        filters: positive int: the filters of the original (single) network's layer, of
            which the packed layer has alpha * filters, alpha * filters / M per member; when
            `last`, the filters of one member (the layer has M * filters).
        kernel_size: int or tuple of 2 ints, the convolution window.
        num_members: M >= 1, the number of members.
        alpha: the width factor, a number > 0; alpha * filters must be an integer divisible
            by M * gamma (default 2).
        gamma: int >= 1, the groups per member (default 1).
        first: True for the layer that reads the shared input (one group).
        last: True for the output layer (M * filters output channels).
        strides: int or tuple of 2 ints (default 1).
        padding: "valid" or "same", case-insensitive (default "valid").
        data_format: "channels_last" (batch, H, W, channels) or "channels_first"; None
            uses Keras' image data format.
        dilation_rate: int or tuple of 2 ints (default 1).
        activation: activation function or its name, as in `keras.layers.Conv2D`
            (default: linear).
        use_bias: whether the layer adds a bias.
        kernel_initializer: initializer of the kernel.
        bias_initializer: initializer of the bias.
        kernel_regularizer: regularizer of the kernel.
        bias_regularizer: regularizer of the bias.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the kernel.
        bias_constraint: constraint on the bias.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: 4-D tensor in `data_format`, its channels divisible by M * gamma unless
            `first`.
        training: unused (the layer is deterministic).

    Returns:
        4-D tensor of `output_width` channels (alpha * filters, or M * filters when
        `last`), its spatial shape as `keras.layers.Conv2D` would make it.

    Example:
    >>> x = np.random.rand(16, 8, 8, 1).astype("float32")
    >>> y = (x.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    >>> model = keras.Sequential([
    ...     keras.Input((8, 8, 1)),
    ...     PackedConv2D(4, 3, num_members=2, first=True, activation="relu"),  # 8 channels
    ...     PackedConv2D(4, 3, num_members=2, activation="relu"),              # 2 groups
    ...     keras.layers.GlobalAveragePooling2D(),
    ...     tfp_bnn.layers.PackedDense(2, num_members=2, last=True),
    ...     tfp_bnn.layers.PackedOutput(2)])
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True)))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> model(x).shape
    TensorShape([16, 2, 2])
    >>> tfp_bnn.predict.classification(model, x, num_samples=2).probs.shape
    (16, 2)
    """

    _width_name = "filters"

    def __init__(self, filters, kernel_size, num_members, alpha=2, gamma=1, first=False,
                 last=False, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 **kwargs):
        conv = conv_arguments(2, filters, kernel_size, strides, padding, data_format,
                              dilation_rate)
        del conv["groups"], conv["filters"]  # the groups are the members'; filters: the base's
        super().__init__(
            filters, num_members, alpha=alpha, gamma=gamma, first=first, last=last,
            activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        for name, value in conv.items():
            setattr(self, name, value)
        self._channel_axis = -1 if self.data_format == "channels_last" else 1
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        channels = self._input_channels(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={self._channel_axis: channels})
        self._build_packed(self.kernel_size + (channels // self.groups, self.output_width))

    def _apply_groups(self, inputs, kernel):
        def conv(x, k):
            return _conv_layout.conv(x, k, self.strides, self.padding, self.data_format,
                                     self.dilation_rate)

        if self.groups == 1:
            return conv(inputs, kernel)
        blocks = ops.split(inputs, self.groups, axis=self._channel_axis)
        kernels = ops.split(kernel, self.groups, axis=-1)
        return ops.concatenate([conv(x, k) for x, k in zip(blocks, kernels)],
                               axis=self._channel_axis)

    def compute_output_shape(self, input_shape):
        spatial = input_shape[1:3] if self.data_format == "channels_last" else input_shape[2:4]
        out = tuple(conv_output_length(n, k, s, d, self.padding) for n, k, s, d in
                    zip(spatial, self.kernel_size, self.strides, self.dilation_rate))
        if self.data_format == "channels_last":
            return (input_shape[0],) + out + (self.output_width,)
        return (input_shape[0], self.output_width) + out

    def get_config(self):
        config = super().get_config()
        config.update({"kernel_size": self.kernel_size, "strides": self.strides,
                       "padding": self.padding, "data_format": self.data_format,
                       "dilation_rate": self.dilation_rate})
        return config

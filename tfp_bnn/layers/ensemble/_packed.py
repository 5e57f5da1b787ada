"""What the Packed-Ensembles layers share (Laurent et al. 2023, ICLR).

A Packed-Ensemble of M members packs M subnetworks of one architecture side by side in one
network of width alpha times the original's (each member alpha / M of it) and keeps them
apart with grouped layers (Laurent et al. 2023, sec. 3): a layer of G = M * gamma
groups is block-diagonal, group g mapping input block g to output block g, and member m owns
groups m * gamma .. m * gamma + gamma - 1 (gamma > 1 splits each member's layer further,
sparser still). Every layer of a packed network keeps member m's features in block m of its
channels, so member m's output depends on its own weights only:

- the first layer (`first=True`) reads the shared input: one group, every member sees every
  input feature; its output block m (alpha * width / M features) is member m's;
- the inner layers are grouped: input and output split into G blocks;
- the last layer (`last=True`) outputs `width` features per member, [B, M * width], member
  m's at block m; `tfp_bnn.layers.PackedOutput(M)` makes that [B, M, width] for
  `tfp_bnn.ensembles.MemberLoss`, or member s mod M per sample inside `tfp_bnn.predict`.

Widths: a layer that is not last has alpha * width outputs, an integer divisible by
M * gamma; a last layer M * width, so width must be divisible by gamma (unless it is also the
first). The kernels keep the layout of `keras.layers.Conv2D(groups=G)`: [..., in / G, out],
group g's block in output columns g * out / G .. (g + 1) * out / G, so the initializers see
the fan-in of one group.
"""

import keras
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.layers._shapes import weight_arguments_config


def packed_widths(width_name, width, num_members, alpha, gamma, first, last):
    """(groups, output width) of a packed layer, or ValueError naming the argument at fault.

    Args:
        width_name: "units" or "filters", for the messages.
        width: the width of the original network's layer (not last), or of one member's
            output (last).
        num_members: M.
        alpha: the width factor.
        gamma: the groups per member.
        first: the layer reads the shared input (one group).
        last: the layer outputs M * width features.

    Returns:
        (G, out): G = 1 for a first layer, else M * gamma.

    Example:
    >>> packed_widths("units", 16, 4, 2, 1, first=False, last=False)
    (4, 32)
    >>> packed_widths("units", 10, 4, 2, 1, first=False, last=True)
    (4, 40)
    """
    groups = 1 if first else num_members * gamma
    if last:
        if not first and width % gamma:
            raise ValueError(
                f"`{width_name}` ({width}) must be divisible by `gamma` ({gamma}) in a last "
                f"layer: each member's {width_name} come from its {gamma} groups.")
        return groups, num_members * width
    scaled = alpha * width
    if abs(scaled - round(scaled)) > 1e-9 * max(1.0, scaled):
        raise ValueError(f"`alpha` * `{width_name}` must be an integer (the layer's width), "
                         f"got {alpha!r} * {width} = {scaled!r}.")
    out = int(round(scaled))
    if out % (num_members * gamma):
        raise ValueError(
            f"`alpha` * `{width_name}` ({out}) must be divisible by `num_members` * `gamma` "
            f"({num_members * gamma}): each of the {num_members} members has {gamma} "
            f"group(s) of equal width.")
    return groups, out


class PackedLayer(keras.layers.Layer):
    """Shallow base of `PackedDense` and `PackedConv2D`: arguments, widths, bias, config.

    A subclass sets `_width_name`, builds with `_build_packed(kernel_shape, channels)` and
    implements `_apply_groups(inputs, kernel)`.

    Args:
        width: `units` or `filters` of the subclass.
        num_members: M >= 1, the number of members.
        alpha: the width factor, a number > 0 (alpha * width an integer).
        gamma: int >= 1, the groups per member in the grouped layers.
        first: True for the layer that reads the network's (shared) input.
        last: True for the layer whose output is the members' outputs, M * width features.
        activation: activation function or its name (default: linear).
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
        inputs: the input tensor, channels on `_channel_axis`.
        training: unused (the layer is deterministic).

    Example:
    >>> layer = tfp_bnn.layers.PackedDense(8, num_members=2)
    >>> isinstance(layer, PackedLayer), layer.groups, layer.output_width
    (True, 2, 16)
    """

    _width_name = None
    _channel_axis = -1

    def __init__(self, width, num_members, alpha=2, gamma=1, first=False, last=False,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 **kwargs):
        width = check.integer(self._width_name, width)
        num_members = check.integer("num_members", num_members)
        alpha = check.positive("alpha", alpha)
        gamma = check.integer("gamma", gamma)
        first = check.boolean("first", first)
        last = check.boolean("last", last)
        groups, output_width = packed_widths(self._width_name, width, num_members, alpha, gamma,
                                             first, last)
        use_bias = check.boolean("use_bias", use_bias)
        arguments = {
            "kernel_initializer": check.initializer("kernel_initializer", kernel_initializer),
            "bias_initializer": check.initializer("bias_initializer", bias_initializer),
            "kernel_regularizer": check.regularizer("kernel_regularizer", kernel_regularizer),
            "bias_regularizer": check.regularizer("bias_regularizer", bias_regularizer),
            "kernel_constraint": check.constraint("kernel_constraint", kernel_constraint),
            "bias_constraint": check.constraint("bias_constraint", bias_constraint),
        }
        activity_regularizer = check.regularizer("activity_regularizer", activity_regularizer)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        setattr(self, self._width_name, width)
        self.num_members = num_members
        self.alpha = alpha
        self.gamma = gamma
        self.first = first
        self.last = last
        self.groups = groups
        self.output_width = output_width
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        for name, value in arguments.items():
            setattr(self, name, value)
        self.kernel = self.bias = None

    def _input_channels(self, input_shape):
        """The input's channels, which the groups must divide; pins them in `input_spec`."""
        channels = input_shape[self._channel_axis]
        who = type(self).__name__
        if channels is None:
            raise ValueError(f"{who} needs a known channel dimension, got input shape "
                             f"{tuple(input_shape)}.")
        if channels % self.groups:
            raise ValueError(
                f"{who} has {self.groups} groups (`num_members` * `gamma`), so its input's "
                f"{channels} channels must be divisible by {self.groups}: feed it a packed "
                "layer of the same num_members and gamma, or set first=True on the layer "
                "that reads the shared input.")
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={self._channel_axis: channels})
        return channels

    def _build_packed(self, kernel_shape):
        self.kernel = self.add_weight(
            name="kernel", shape=kernel_shape, initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(self.output_width,), initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint)

    def call(self, inputs, training=None):
        dtype = self.compute_dtype
        outputs = self._apply_groups(ops.cast(inputs, dtype), ops.cast(self.kernel, dtype))
        if self.bias is not None:
            bias = ops.cast(self.bias, dtype)
            if self._channel_axis != -1:
                shape = [1] * len(outputs.shape)
                shape[self._channel_axis] = self.output_width
                bias = ops.reshape(bias, shape)
            outputs = outputs + bias
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def _apply_groups(self, inputs, kernel):
        raise NotImplementedError

    @property
    def member_width(self):
        """The output channels of one member: output_width / M."""
        return self.output_width // self.num_members

    def get_config(self):
        config = super().get_config()
        config.update(weight_arguments_config(self))
        config.update({self._width_name: getattr(self, self._width_name),
                       "num_members": self.num_members, "alpha": self.alpha,
                       "gamma": self.gamma, "first": self.first, "last": self.last})
        return config

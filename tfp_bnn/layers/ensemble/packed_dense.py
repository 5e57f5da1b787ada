"""Dense layer of a Packed-Ensemble (Laurent et al. 2023)."""

import keras
from keras import ops

from tfp_bnn.layers.ensemble._packed import PackedLayer


@keras.saving.register_keras_serializable(package="tfp_bnn")
class PackedDense(PackedLayer):
    """Dense layer of M packed members: a grouped (block-diagonal) Dense of M * gamma groups.

    With G groups of the input features x = [x_1, ..., x_G] and kernel blocks W_g
    [in / G, out / G], output block g is

        y_g = act(x_g @ W_g + b_g)                    (Laurent et al. 2023, sec. 3)

    one batched matmul (an einsum over [..., G, in / G] x [G, in / G, out / G]). Member m
    owns groups m * gamma .. m * gamma + gamma - 1, so its features never meet another
    member's weights (see `tfp_bnn.layers.ensemble._packed` for the layout). The layer
    reading the network's input is `first=True` (one group: every member sees all input
    features); the output layer is `last=True` (`units` outputs per member, [B, M * units])
    followed by `tfp_bnn.layers.PackedOutput(M)`: [B, M, units] for
    `tfp_bnn.ensembles.MemberLoss`, and inside `tfp_bnn.predict` sample s from member
    s mod M, so that `tfp_bnn.predict` averages the members. Every sample computes all M
    members and keeps one: a prediction costs M times a single pass per sample; use
    `num_samples=M` (the exact mixture; another multiple of M repeats it).

    The kernel is [in / G, alpha * units] (or [in / G, M * units] when last), group g's
    block in columns g * out / G .. (g + 1) * out / G, as `keras.layers.Conv2D(groups=G)`
    stores its kernel.

    Args:
        units: positive int: the width of the original (single) network's layer, of which
            the packed layer has alpha * units outputs, alpha * units / M per member; when
            `last`, the outputs of one member (the layer has M * units).
        num_members: M >= 1, the number of members.
        alpha: the width factor, a number > 0; alpha * units must be an integer divisible by
            M * gamma (default 2).
        gamma: int >= 1, the groups per member (default 1).
        first: True for the layer that reads the shared input (one group).
        last: True for the output layer (M * units outputs).
        activation: activation function or its name, as in `keras.layers.Dense`
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
        inputs: tensor of rank >= 2, last axis the input features (divisible by M * gamma
            unless `first`).
        training: unused (the layer is deterministic).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (output_width,)`: alpha * units, or M * units
        when `last`.

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = (x.sum(axis=1) > 2).astype("int32")
    >>> model = keras.Sequential([
    ...     keras.Input((4,)),
    ...     PackedDense(16, num_members=4, first=True, activation="relu"),   # 32 features
    ...     PackedDense(16, num_members=4, activation="relu"),               # 4 groups
    ...     PackedDense(2, num_members=4, last=True),                        # [B, 4 * 2]
    ...     tfp_bnn.layers.PackedOutput(4)])                                 # [B, 4, 2]
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True)))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> model(x).shape
    TensorShape([32, 4, 2])
    >>> tfp_bnn.predict.classification(model, x, num_samples=4).probs.shape
    (32, 2)
    """

    _width_name = "units"

    def __init__(self, units, num_members, alpha=2, gamma=1, first=False, last=False,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 **kwargs):
        super().__init__(
            units, num_members, alpha=alpha, gamma=gamma, first=first, last=last,
            activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs)
        # As keras.layers.Dense: acts per position, so a sequence mask passes through.
        self.supports_masking = True

    def build(self, input_shape):
        channels = self._input_channels(input_shape)
        self._build_packed((channels // self.groups, self.output_width))

    def _apply_groups(self, inputs, kernel):
        if self.groups == 1:
            return ops.matmul(inputs, kernel)
        groups = self.groups
        per_group_in = kernel.shape[0]
        lead = tuple(ops.shape(inputs)[:-1])
        blocks = ops.reshape(inputs, lead + (groups, per_group_in))
        # [in / G, G * out / G] -> [in / G, G, out / G]: column block g is group g's.
        kernels = ops.reshape(kernel, (per_group_in, groups, self.output_width // groups))
        outputs = ops.einsum("...gi,igo->...go", blocks, kernels)
        return ops.reshape(outputs, lead + (self.output_width,))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_width,)

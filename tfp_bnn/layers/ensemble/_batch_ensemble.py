"""What the BatchEnsemble layers share (Wen, Tran and Ba 2020, ICLR).

Member m of a BatchEnsemble layer has the weight W o (s_m r_m^T): one kernel W shared by
the M members, times a rank-1 matrix of per-member "fast weights" r_m (input side) and s_m
(output side), plus a bias b_m of its own. Applied to an input x this is

    y_m = ((x o r_m) W) o s_m + b_m                       (Wen et al. 2020, sec. 3)

(for a convolution r_m scales the input channels, s_m and b_m the output channels). The
M members run on one batch tiled M times, tile t computed by member t mod M
(`tfp_bnn.layers.ensemble._tiles`): one matmul or convolution for all members, the factors
broadcast per tile. The weights: W as the Keras layer's kernel, r [M, in], s [M, out] and
b [M, out]; M times the parameters of r, s and b added to those of one network.

The fast weights start at N(1, 0.5^2), one of the paper's two initialisations of them
(random signs being the other): members start near the shared network, different enough to
train apart.
"""

import keras
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.layers._shapes import weight_arguments_config
from tfp_bnn.layers.ensemble import _tiles


def default_fast_weight_initializer():
    """N(1, 0.5^2), the initial fast weights when none is given.

    Example:
    >>> default_fast_weight_initializer().get_config()["mean"]
    1.0
    """
    return keras.initializers.RandomNormal(mean=1.0, stddev=0.5)


def _fresh(initializer, offset):
    """A copy of `initializer` whose draws differ from it by `offset` (int seeds) or a new
    default seed (seed None), so that r and s do not start equal."""
    config = initializer.get_config()
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        config["seed"] = seed + offset
    return type(initializer).from_config(config)


class BatchEnsembleLayer(_tiles.MembersLayer):
    """Shallow base of `BatchEnsembleDense` and `BatchEnsembleConv2D`.

    A subclass lists a shape mixin first (`tfp_bnn.layers._shapes.DenseShapes` or
    `Conv2DShapes`), which holds the kernel's arguments, shape and application, and calls
    `_build_ensemble(kernel_shape, in_channels, out_channels)` from its `build`. The members
    (`num_members`, `samples_multiple`) are those of `_tiles.MembersLayer`, which this base
    extends with the weights and their arguments.

    Args:
        num_members: M >= 1, the number of members.
        activation: activation function or its name (default: linear).
        use_bias: whether each member adds its bias b_m.
        kernel_initializer: initializer of the shared kernel W.
        bias_initializer: initializer of the biases b [M, out].
        fast_weight_initializer: initializer of the fast weights r [M, in] and s [M, out];
            None is `RandomNormal(mean=1.0, stddev=0.5)`.
        kernel_regularizer: regularizer of W.
        bias_regularizer: regularizer of b.
        fast_weight_regularizer: regularizer of r and of s.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on W.
        bias_constraint: constraint on b.
        fast_weight_constraint: constraint on r and on s.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [T * B, ...], T tiles of B rows (T = M outside `tfp_bnn.predict`).
        training: unused (the layer is deterministic).

    Example:
    >>> layer = tfp_bnn.layers.BatchEnsembleDense(2, num_members=3)
    >>> isinstance(layer, BatchEnsembleLayer), layer(np.ones((6, 4), "float32")).shape
    (True, TensorShape([6, 2]))
    """

    _channel_axis = -1

    def __init__(self, num_members, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 fast_weight_initializer=None, kernel_regularizer=None, bias_regularizer=None,
                 fast_weight_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, fast_weight_constraint=None, **kwargs):
        use_bias = check.boolean("use_bias", use_bias)
        initializers = {
            "kernel_initializer": check.initializer("kernel_initializer", kernel_initializer),
            "bias_initializer": check.initializer("bias_initializer", bias_initializer),
            "fast_weight_initializer": (
                default_fast_weight_initializer() if fast_weight_initializer is None else
                check.initializer("fast_weight_initializer", fast_weight_initializer)),
        }
        regularizers = {name: check.regularizer(name, value) for name, value in (
            ("kernel_regularizer", kernel_regularizer), ("bias_regularizer", bias_regularizer),
            ("fast_weight_regularizer", fast_weight_regularizer))}
        constraints = {name: check.constraint(name, value) for name, value in (
            ("kernel_constraint", kernel_constraint), ("bias_constraint", bias_constraint),
            ("fast_weight_constraint", fast_weight_constraint))}
        activity_regularizer = check.regularizer("activity_regularizer", activity_regularizer)
        super().__init__(num_members, activity_regularizer=activity_regularizer, **kwargs)
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        for name, value in {**initializers, **regularizers, **constraints}.items():
            setattr(self, name, value)
        self.kernel = self.input_fast_weight = self.output_fast_weight = self.bias = None

    def _build_ensemble(self, kernel_shape, in_channels, out_channels):
        """Creates W, r [M, in], s [M, out] and b [M, out]."""
        members = self.num_members
        self.kernel = self.add_weight(
            name="kernel", shape=kernel_shape, initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.input_fast_weight = self.add_weight(
            name="input_fast_weight", shape=(members, in_channels),
            initializer=self.fast_weight_initializer,
            regularizer=self.fast_weight_regularizer, constraint=self.fast_weight_constraint)
        self.output_fast_weight = self.add_weight(
            name="output_fast_weight", shape=(members, out_channels),
            initializer=_fresh(self.fast_weight_initializer, 1),
            regularizer=self.fast_weight_regularizer, constraint=self.fast_weight_constraint)
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(members, out_channels), initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint)

    def call(self, inputs, training=None):
        dtype = self.compute_dtype
        inputs = ops.cast(inputs, dtype)
        who = type(self).__name__
        tiles = _tiles.num_tiles(self.num_members, who)
        _tiles.check_rows(inputs, tiles, who)

        def member_values(weight):
            return _tiles.per_tile(ops.cast(weight, dtype), tiles)

        scaled = _tiles.affine_per_tile(inputs, member_values(self.input_fast_weight), None,
                                        tiles, self._channel_axis)
        outputs = self._apply_kernel(scaled, ops.cast(self.kernel, dtype))
        shift = None if self.bias is None else member_values(self.bias)
        outputs = _tiles.affine_per_tile(outputs, member_values(self.output_fast_weight), shift,
                                         tiles, self._channel_axis)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def _apply_kernel(self, inputs, kernel):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(weight_arguments_config(self))
        config.update({
            "fast_weight_initializer": keras.initializers.serialize(
                self.fast_weight_initializer),
            "fast_weight_regularizer": keras.regularizers.serialize(
                self.fast_weight_regularizer),
            "fast_weight_constraint": keras.constraints.serialize(self.fast_weight_constraint),
        })
        return config

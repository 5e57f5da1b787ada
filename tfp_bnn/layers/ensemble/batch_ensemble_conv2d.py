"""2-D convolution of a BatchEnsemble (Wen, Tran and Ba 2020)."""

import keras

from tfp_bnn.layers._shapes import Conv2DShapes
from tfp_bnn.layers.ensemble._batch_ensemble import BatchEnsembleLayer


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BatchEnsembleConv2D(Conv2DShapes, BatchEnsembleLayer):
    """2-D convolution of M BatchEnsemble members sharing one kernel.

    Member m computes

        y_m = act(conv(x o r_m, W) o s_m + b_m)           (Wen et al. 2020, sec. 3)

    with the kernel W shared and per member the fast weights r_m (one factor per input
    channel), s_m and the bias b_m (one per filter), shared over the spatial positions.
    The batch holds T tiles of B rows, tile t computed by member t mod M, as in
    `BatchEnsembleDense` (which see for `EnsembleTile`, `EnsembleUntile`, `MemberLoss` and
    `tfp_bnn.predict`: `num_samples` a multiple of M, exact mixture at `num_samples=M`).
    Without `groups` (`keras.layers.Conv2D`'s grouped convolutions do not run on every
    TensorFlow CPU kernel; see `PackedConv2D`).

    Args:
        filters: positive int, the number of output channels.
        kernel_size: int or tuple of 2 ints, the convolution window.
        num_members: M >= 1, the number of members.
        strides: int or tuple of 2 ints (default 1).
        padding: "valid" or "same", case-insensitive (default "valid").
        data_format: "channels_last" (batch, H, W, channels) or "channels_first"; None
            uses Keras' image data format.
        dilation_rate: int or tuple of 2 ints (default 1).
        activation: activation function or its name, as in `keras.layers.Conv2D`
            (default: linear).
        use_bias: whether each member adds its bias b_m.
        kernel_initializer: initializer of the shared kernel W.
        bias_initializer: initializer of the biases b [M, filters].
        fast_weight_initializer: initializer of the fast weights r [M, in channels] and
            s [M, filters]; None is `keras.initializers.RandomNormal(mean=1.0, stddev=0.5)`.
        kernel_regularizer: regularizer of W.
        bias_regularizer: regularizer of b.
        fast_weight_regularizer: regularizer of r and of s.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on W.
        bias_constraint: constraint on b.
        fast_weight_constraint: constraint on r and on s.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: 4-D tensor in `data_format`, [T * B, ...]: T = M tiles outside
            `tfp_bnn.predict` (as `EnsembleTile` makes them), T = S inside.
        training: unused (the layer is deterministic).

    Returns:
        4-D tensor, shaped as `keras.layers.Conv2D` would shape it.

    Example:
    >>> x = np.random.rand(16, 8, 8, 1).astype("float32")
    >>> y = (x.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    >>> inputs = keras.Input((8, 8, 1))
    >>> hidden = tfp_bnn.layers.EnsembleTile(2)(inputs)
    >>> hidden = BatchEnsembleConv2D(4, 3, num_members=2, activation="relu")(hidden)
    >>> hidden = keras.layers.GlobalAveragePooling2D()(hidden)
    >>> logits = tfp_bnn.layers.BatchEnsembleDense(2, num_members=2)(hidden)
    >>> model = keras.Model(inputs, tfp_bnn.layers.EnsembleUntile(2)(logits))
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True)))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> tfp_bnn.predict.classification(model, x, num_samples=2).probs.shape
    (16, 2)
    """

    def __init__(self, filters, kernel_size, num_members, strides=1, padding="valid",
                 data_format=None, dilation_rate=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 fast_weight_initializer=None, kernel_regularizer=None, bias_regularizer=None,
                 fast_weight_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, fast_weight_constraint=None, **kwargs):
        super().__init__(
            filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
            dilation_rate=dilation_rate, num_members=num_members, activation=activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, fast_weight_initializer=fast_weight_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            fast_weight_regularizer=fast_weight_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, fast_weight_constraint=fast_weight_constraint,
            **kwargs)
        # Always 1 here (no `groups` argument): not part of the config.
        self._conv_names = tuple(name for name in self._conv_names if name != "groups")

    def build(self, input_shape):
        kernel_shape, _, channels = self._conv_shapes(input_shape)
        self._build_ensemble(kernel_shape, channels, self.filters)

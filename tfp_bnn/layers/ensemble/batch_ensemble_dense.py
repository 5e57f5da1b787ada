"""Dense layer of a BatchEnsemble (Wen, Tran and Ba 2020)."""

import keras

from tfp_bnn.layers._shapes import DenseShapes
from tfp_bnn.layers.ensemble._batch_ensemble import BatchEnsembleLayer


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BatchEnsembleDense(DenseShapes, BatchEnsembleLayer):
    """Densely connected layer of M BatchEnsemble members sharing one kernel.

    Member m computes

        y_m = act(((x o r_m) @ W) o s_m + b_m)            (Wen et al. 2020, sec. 3)

    with W [in, units] shared and the fast weights r_m [in], s_m [units] and the bias
    b_m [units] its own. The batch holds T tiles of B rows, tile t computed by member
    t mod M: put `tfp_bnn.layers.EnsembleTile(M)` at the model's input (it makes the M
    tiles in training and evaluation) and `tfp_bnn.layers.EnsembleUntile(M)` at its output
    (outputs [B, M, ...], member m at [:, m]), and compile with
    `tfp_bnn.ensembles.MemberLoss`, which trains each member on its own slice.
    `tfp_bnn.predict` tiles the batch S times itself, sample s computed by member s mod M:
    with `num_samples` a multiple of M (others are refused: the layer declares
    `samples_multiple = M`) the prediction is the equal mixture of the M members, exact
    for `num_samples=M`. See `tfp_bnn.layers.ensemble._batch_ensemble` for the
    initialisation. Acts on the last axis of inputs of rank >= 2, as `keras.layers.Dense`.

    Args:
        units: positive int, the output dimension.
        num_members: M >= 1, the number of members.
        activation: activation function or its name, as in `keras.layers.Dense`
            (default: linear).
        use_bias: whether each member adds its bias b_m.
        kernel_initializer: initializer of the shared kernel W.
        bias_initializer: initializer of the biases b [M, units].
        fast_weight_initializer: initializer of the fast weights r [M, in] and s [M, units];
            None is `keras.initializers.RandomNormal(mean=1.0, stddev=0.5)`.
        kernel_regularizer: regularizer of W.
        bias_regularizer: regularizer of b.
        fast_weight_regularizer: regularizer of r and of s.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on W.
        bias_constraint: constraint on b.
        fast_weight_constraint: constraint on r and on s.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [T * B, ..., in]: T = M tiles outside `tfp_bnn.predict` (as
            `EnsembleTile` makes them), T = S inside.
        training: unused (the layer is deterministic).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = (x.sum(axis=1) > 2).astype("int32")
    >>> inputs = keras.Input((4,))
    >>> hidden = tfp_bnn.layers.EnsembleTile(3)(inputs)
    >>> hidden = BatchEnsembleDense(16, num_members=3, activation="relu")(hidden)
    >>> logits = tfp_bnn.layers.EnsembleUntile(3)(BatchEnsembleDense(2, num_members=3)(hidden))
    >>> model = keras.Model(inputs, logits)
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True)))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> model(x).shape                             # member m's logits at [:, m]
    TensorShape([32, 3, 2])
    >>> tfp_bnn.predict.classification(model, x, num_samples=3).probs.shape
    (32, 2)
    """

    def __init__(self, units, num_members, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 fast_weight_initializer=None, kernel_regularizer=None, bias_regularizer=None,
                 fast_weight_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, fast_weight_constraint=None, **kwargs):
        super().__init__(
            units, num_members=num_members, activation=activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            fast_weight_initializer=fast_weight_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            fast_weight_regularizer=fast_weight_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, fast_weight_constraint=fast_weight_constraint,
            **kwargs)

    def build(self, input_shape):
        kernel_shape, _, input_dim = self._dense_shapes(input_shape)
        self._build_ensemble(kernel_shape, input_dim, self.units)

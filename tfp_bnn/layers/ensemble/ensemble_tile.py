"""The input of a BatchEnsemble: the batch tiled once per member."""

import keras
from keras import ops

from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.layers.ensemble import _tiles


@keras.saving.register_keras_serializable(package="tfp_bnn")
class EnsembleTile(_tiles.MembersLayer):
    """Tiles a batch M times, member-major, for the BatchEnsemble layers after it.

    [B, ...] -> [M * B, ...]: row m * B + b is example b for member m (tile m, see
    `BatchEnsembleDense`). Inside `tfp_bnn.predict` the batch arrives tiled S times already
    (sample s for member s mod M), and the layer passes it on unchanged; it declares
    `samples_multiple = M`, so `tfp_bnn.predict` refuses a `num_samples` that is not a
    multiple of M.

    Args:
        num_members: M >= 1, the number of members.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: a tensor [B, ...] of any rank >= 1.

    Returns:
        [M * B, ...] (the inputs themselves inside `tfp_bnn.predict`).

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> inputs = keras.Input((4,))
    >>> hidden = EnsembleTile(2)(inputs)
    >>> hidden = tfp_bnn.layers.BatchEnsembleDense(8, num_members=2, activation="relu")(hidden)
    >>> outputs = tfp_bnn.layers.BatchEnsembleDense(2, num_members=2)(hidden)
    >>> model = keras.Model(inputs, tfp_bnn.layers.EnsembleUntile(2)(outputs))
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(tfp_bnn.losses.GaussianNLL()))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> EnsembleTile(2)(x).shape
    TensorShape([64, 4])
    >>> tfp_bnn.predict.regression(model, x, num_samples=2).mean.shape
    (32, 1)
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(num_members, **kwargs)

    def call(self, inputs):
        _tiles.num_tiles(self.num_members, type(self).__name__)  # S a multiple of M
        if sample_context() is not None:  # tiled S times by `tfp_bnn.predict` already
            return inputs
        return ops.tile(inputs, (self.num_members,) + (1,) * (len(inputs.shape) - 1))

    def compute_output_shape(self, input_shape):
        rows = input_shape[0]
        return (None if rows is None else self.num_members * rows,) + tuple(input_shape[1:])

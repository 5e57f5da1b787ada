"""The output of a BatchEnsemble: the members' tiles side by side, [B, M, ...]."""

import keras
from keras import ops

from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.layers.ensemble import _tiles


@keras.saving.register_keras_serializable(package="tfp_bnn")
class EnsembleUntile(_tiles.MembersLayer):
    """Sorts the M tiles of a BatchEnsemble's output into [B, M, ...], member m at [:, m].

    [M * B, ...] (tile m from member m, as `EnsembleTile` and the BatchEnsemble layers
    make it) -> [B, M, ...]: the layout of `tfp_bnn.ensembles`, so that
    `tfp_bnn.ensembles.MemberLoss` trains each member on its own slice and
    `tfp_bnn.ensembles.MixtureAccuracy` scores the mixture. Inside `tfp_bnn.predict` the
    outputs stay [S * B, ...], sample s from member s mod M, which `tfp_bnn.predict`
    averages: the layer passes them on unchanged. It declares `samples_multiple = M`.

    Args:
        num_members: M >= 1, the number of members.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [M * B, ...], a tensor of any rank >= 1.

    Returns:
        [B, M, ...] (the inputs themselves inside `tfp_bnn.predict`).

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = (x[:, 0] > 0.5).astype("int32")
    >>> inputs = keras.Input((4,))
    >>> hidden = tfp_bnn.layers.EnsembleTile(4)(inputs)
    >>> logits = tfp_bnn.layers.BatchEnsembleDense(2, num_members=4)(hidden)
    >>> model = keras.Model(inputs, EnsembleUntile(4)(logits))
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
    ...     metrics=[tfp_bnn.ensembles.MixtureAccuracy()])
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> model.output.shape
    (None, 4, 2)
    >>> tfp_bnn.predict.classification(model, x, num_samples=4).probs.shape
    (32, 2)
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(num_members, **kwargs)

    def call(self, inputs):
        who = type(self).__name__
        _tiles.num_tiles(self.num_members, who)  # S a multiple of M
        if sample_context() is not None:
            return inputs
        _tiles.check_rows(inputs, self.num_members, who)
        grid = _tiles.split_tiles(inputs, self.num_members)  # [M, B, ...]
        return ops.moveaxis(grid, 0, 1)

    def compute_output_shape(self, input_shape):
        rows = input_shape[0]
        rows = None if rows is None else rows // self.num_members
        return (rows, self.num_members) + tuple(input_shape[1:])

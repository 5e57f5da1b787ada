"""The output of a Packed-Ensemble: the members' blocks of features side by side, [B, M, ...]."""

import keras
from keras import ops

from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.layers.ensemble import _tiles


@keras.saving.register_keras_serializable(package="tfp_bnn")
class PackedOutput(_tiles.MembersLayer):
    """Splits a packed network's last axis into its M members: [B, ..., M * K] -> [B, M, ..., K].

    After the `last=True` layer of a Packed-Ensemble (`PackedDense`, `PackedConv2D`), whose
    output holds member m's K features in block m of the last axis. In `fit`, `evaluate`
    and a plain call the output is [B, M, ..., K], member m at [:, m], the layout of
    `tfp_bnn.ensembles` (`MemberLoss` trains each member on its own slice). Inside
    `tfp_bnn.predict` (the batch tiled S times) it is [S * B, ..., K], sample s from member
    s mod M, so that `tfp_bnn.predict` averages the members; the layer declares
    `samples_multiple = M`. Every sample computed all M members: `num_samples=M` is the
    exact mixture at M times the cost of a single pass.

    Args:
        num_members: M >= 1, the number of members.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [B, ..., M * K], a tensor of rank >= 2.

    Returns:
        [B, M, ..., K], or [S * B, ..., K] inside `tfp_bnn.predict`.

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> model = keras.Sequential([
    ...     keras.Input((4,)),
    ...     tfp_bnn.layers.PackedDense(8, num_members=2, first=True, activation="relu"),
    ...     tfp_bnn.layers.PackedDense(2, num_members=2, last=True),   # [B, 2 * (mean, log var)]
    ...     PackedOutput(2)])
    >>> model.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(tfp_bnn.losses.GaussianNLL()))
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    >>> model(x).shape
    TensorShape([32, 2, 2])
    >>> tfp_bnn.predict.regression(model, x, num_samples=2).mean.shape
    (32, 1)
    """

    def __init__(self, num_members, **kwargs):
        super().__init__(num_members, **kwargs)

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None or channels % self.num_members:
            raise ValueError(
                f"PackedOutput splits the last axis into its {self.num_members} members "
                f"(`num_members`), got input shape {tuple(input_shape)}: the last axis must "
                f"be a known multiple of {self.num_members}.")
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: channels})

    def call(self, inputs):
        members = self.num_members
        tiles = _tiles.num_tiles(members, type(self).__name__)
        shape = ops.shape(inputs)
        split = ops.reshape(inputs, tuple(shape[:-1]) + (members, shape[-1] // members))
        if sample_context() is not None:
            return _tiles.pick_members(split, members, tiles)
        return ops.moveaxis(split, -2, 1)

    def compute_output_shape(self, input_shape):
        width = input_shape[-1] // self.num_members
        return (input_shape[0], self.num_members) + tuple(input_shape[1:-1]) + (width,)

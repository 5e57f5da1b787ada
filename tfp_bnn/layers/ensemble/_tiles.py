"""Rows grouped in tiles of B, tile t from member t mod M: the layout of the cheap ensembles.

A BatchEnsemble network runs its M members on one batch by tiling it (Wen, Tran and Ba
2020, sec. 3): row t * B + b of the layer's input is example b seen by tile t, and tile t
is computed by member t mod M. Outside `tfp_bnn.predict` there are T = M tiles, one per
member (`EnsembleTile` makes them at the input, `EnsembleUntile` sorts the outputs into
[B, M, ...] for `tfp_bnn.ensembles.MemberLoss`). Inside `sample_trace` the batch is already
tiled S times, sample-major (`tfp_bnn.layers._tracing`), so T = S and sample s is member
s mod M: with S a multiple of M, `tfp_bnn.predict` averages the M members equally, the
exact predictive of the ensemble (`tfp_bnn.ensembles`, which keeps the same convention).

On JAX, `tfp_bnn.predict` runs one mapped call per group of `samples_multiple` samples
(`tfp_bnn.predict._jax_runner`); a group starts at a multiple of M, so t mod M within the
call is still the sample's member.

Every function here works on tensors whose batch size is known only at run time (a
compiled `fit` step); static sizes are checked where they are known. `MembersLayer` is the
shallow base of the layers that read or write this layout: `num_members` and
`samples_multiple = M`.
"""

import keras
import numpy as np
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.layers._tracing import sample_context


def num_tiles(num_members, who):
    """T, the number of tiles of the batch: M outside `sample_trace`, S inside.

    Args:
        num_members: M.
        who: the caller's name, for the error message.

    Returns:
        An int T, a multiple of M (ValueError inside a trace of S samples that is not).

    Example:
    >>> from tfp_bnn.layers._tracing import sample_trace
    >>> num_tiles(3, "layer")
    3
    >>> with sample_trace(6):
    ...     num_tiles(3, "layer")
    6
    """
    context = sample_context()
    if context is None:
        return num_members
    samples = context.num_samples
    if samples % num_members:
        raise ValueError(
            f"{who} is an ensemble of {num_members} members and predicts their mixture: "
            f"num_samples (and samples_per_call) must be a multiple of {num_members}, got a "
            f"call of {samples} samples.")
    return samples


def check_rows(inputs, tiles, who):
    """Refuses a batch whose static size is not a multiple of the number of tiles.

    Args:
        inputs: the layer's input, batch axis first.
        tiles: T.
        who: the caller's name, for the error message.

    Example:
    >>> check_rows(np.zeros((6, 2)), 3, "layer") is None
    True
    """
    rows = inputs.shape[0]
    if rows is not None and rows % tiles:
        raise ValueError(
            f"{who} takes a batch of T = {tiles} tiles of B rows each (tile t is member "
            f"t mod M), got {rows} rows. Put `tfp_bnn.layers.EnsembleTile` before the first "
            "BatchEnsemble layer.")


def per_tile(values, tiles):
    """values [M, ...] -> [T, ...]: row t is member t mod M's.

    Example:
    >>> per_tile(np.array([[1.0], [2.0]]), 4).numpy()[:, 0]
    array([1., 2., 1., 2.])
    """
    members = values.shape[0]
    if tiles == members:
        return values
    return ops.take(values, np.arange(tiles) % members, axis=0)


def split_tiles(inputs, tiles):
    """[T * B, ...] -> [T, B, ...] (B may be known at run time only).

    Example:
    >>> split_tiles(np.arange(6.0).reshape(6, 1), 3).shape
    TensorShape([3, 2, 1])
    """
    shape = ops.shape(inputs)
    return ops.reshape(inputs, (tiles, -1) + tuple(shape[1:]))


def merge_tiles(inputs):
    """[T, B, ...] -> [T * B, ...].

    Example:
    >>> merge_tiles(np.zeros((3, 2, 4))).shape
    TensorShape([6, 4])
    """
    shape = ops.shape(inputs)
    return ops.reshape(inputs, (-1,) + tuple(shape[2:]))


def affine_per_tile(inputs, scale, shift, tiles, channel_axis):
    """inputs * scale[t] (+ shift[t]) on tile t, along the channel axis.

    Args:
        inputs: [T * B, ...].
        scale: [T, C], the factors of each tile (C the size of `channel_axis`).
        shift: [T, C] or None.
        tiles: T.
        channel_axis: -1 (channels last) or 1 (channels first) of `inputs`.

    Returns:
        A tensor of the inputs' shape.

    Example:
    >>> x = np.ones((4, 2), "float32")
    >>> affine_per_tile(x, np.array([[1.0, 2.0], [3.0, 4.0]], "float32"), None, 2, -1).numpy()
    array([[1., 2.],
           [1., 2.],
           [3., 4.],
           [3., 4.]], dtype=float32)
    """
    grid = split_tiles(inputs, tiles)
    rank = len(grid.shape)
    axis = rank - 1 if channel_axis == -1 else channel_axis + 1
    shape = [1] * rank
    shape[0], shape[axis] = tiles, scale.shape[-1]
    grid = grid * ops.reshape(scale, shape)
    if shift is not None:
        grid = grid + ops.reshape(shift, shape)
    return merge_tiles(grid)


def pick_members(inputs, num_members, tiles):
    """[T * B, ..., M, C] -> [T * B, ..., C]: tile t keeps its member t mod M.

    Example:
    >>> x = np.arange(8.0).reshape(4, 2, 1)   # 4 rows (2 tiles of 2), 2 members, 1 channel
    >>> pick_members(x, 2, 2).numpy()[:, 0]
    array([0., 2., 5., 7.])
    """
    shape = ops.shape(inputs)
    rank = len(inputs.shape)
    # Axes [T / M, M (tile), B, ..., M (member), C]; the diagonal of the two M axes is tile
    # q * M + m taking member m.
    grid = ops.reshape(inputs, (tiles // num_members, num_members, -1) + tuple(shape[1:]))
    picked = ops.diagonal(grid, axis1=1, axis2=rank)  # [T / M, B, ..., C, M]
    picked = ops.moveaxis(picked, -1, 1)
    return ops.reshape(picked, (-1,) + tuple(shape[1:-2]) + (shape[-1],))


class MembersLayer(keras.layers.Layer):
    """Shallow base of the layers of M members in the tile layout.

    It holds `num_members` (checked, in the config) and declares `samples_multiple = M`, so
    that `tfp_bnn.predict` keeps every traced call's sample count a multiple of M and sample
    s is member s mod M. `EnsembleTile`, `EnsembleUntile` and `PackedOutput` are this base
    and their `call` (inputs of any rank >= 1 unless their `build` says more);
    `tfp_bnn.layers.ensemble._batch_ensemble.BatchEnsembleLayer` adds its weights. The
    layers of a packed network before `PackedOutput` are not members layers: each of their
    rows holds every member, whatever the sample count.

    Args:
        num_members: M >= 1, the number of members.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Example:
    >>> layer = tfp_bnn.layers.EnsembleTile(3)
    >>> isinstance(layer, MembersLayer), layer.samples_multiple, layer.get_config()["num_members"]
    (True, 3, 3)
    """

    def __init__(self, num_members, **kwargs):
        num_members = check.integer("num_members", num_members)
        super().__init__(**kwargs)
        self.num_members = num_members

    @property
    def samples_multiple(self):
        """M: `tfp_bnn.predict` keeps every traced call's sample count a multiple of it."""
        return self.num_members

    def build(self, input_shape):
        self.input_spec = keras.layers.InputSpec(min_ndim=1)

    def get_config(self):
        config = super().get_config()
        config["num_members"] = self.num_members
        return config

"""The tile layout of the cheap ensembles: tile t of the batch is member t mod M."""

import numpy as np
import pytest
from keras import ops

from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.layers.ensemble import _tiles

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(0)


def test_num_tiles_is_m_outside_and_s_inside_a_trace():
    assert _tiles.num_tiles(3, "layer") == 3
    with sample_trace(6):
        assert _tiles.num_tiles(3, "layer") == 6
        assert _tiles.num_tiles(1, "layer") == 6
    with sample_trace(4), pytest.raises(ValueError) as error:
        _tiles.num_tiles(3, "MyLayer")
    assert str(error.value).startswith("MyLayer is an ensemble of 3 members")
    assert "multiple of 3, got a call of 4 samples" in str(error.value)


def test_per_tile_takes_member_t_mod_m():
    values = RNG.normal(size=(3, 2)).astype("float32")
    np.testing.assert_array_equal(ops.convert_to_numpy(_tiles.per_tile(values, 3)), values)
    taken = ops.convert_to_numpy(_tiles.per_tile(values, 9))
    np.testing.assert_array_equal(taken, values[np.arange(9) % 3])


@pytest.mark.parametrize("channel_axis", [-1, 1])
def test_affine_per_tile_scales_and_shifts_each_tile_by_its_own_row(channel_axis):
    tiles, rows, channels = 4, 3, 2
    shape = (tiles * rows, 5, channels) if channel_axis == -1 else (tiles * rows, channels, 5)
    x = RNG.normal(size=shape).astype("float32")
    scale = RNG.normal(size=(tiles, channels)).astype("float32")
    shift = RNG.normal(size=(tiles, channels)).astype("float32")
    got = ops.convert_to_numpy(_tiles.affine_per_tile(x, scale, shift, tiles, channel_axis))
    expected, scaled = np.empty_like(x), np.empty_like(x)
    for row in range(tiles * rows):
        t = row // rows
        factor, offset = scale[t], shift[t]
        if channel_axis == 1:
            factor, offset = factor[:, None], offset[:, None]
        scaled[row] = x[row] * factor
        expected[row] = scaled[row] + offset
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    no_shift = _tiles.affine_per_tile(x, scale, None, tiles, channel_axis)
    np.testing.assert_allclose(ops.convert_to_numpy(no_shift), scaled, rtol=1e-6, atol=1e-6)


def test_split_and_merge_tiles_invert_each_other():
    x = RNG.normal(size=(6, 2, 3)).astype("float32")
    grid = ops.convert_to_numpy(_tiles.split_tiles(x, 3))
    np.testing.assert_array_equal(grid, x.reshape(3, 2, 2, 3))
    np.testing.assert_array_equal(ops.convert_to_numpy(_tiles.merge_tiles(grid)), x)


@pytest.mark.parametrize("tiles", [2, 4])
def test_pick_members_keeps_tile_t_from_member_t_mod_m(tiles):
    members, rows = 2, 3
    x = RNG.normal(size=(tiles * rows, 5, members, 4)).astype("float32")
    got = ops.convert_to_numpy(_tiles.pick_members(x, members, tiles))
    expected = np.stack([x[row, :, (row // rows) % members] for row in range(tiles * rows)])
    np.testing.assert_array_equal(got, expected)


def test_check_rows_names_the_layer_and_the_fix():
    _tiles.check_rows(np.zeros((6, 2)), 3, "layer")
    with pytest.raises(ValueError, match="BatchEnsembleDense takes a batch of T = 4 tiles.*got "
                                         "6 rows.*EnsembleTile"):
        _tiles.check_rows(np.zeros((6, 2)), 4, "BatchEnsembleDense")


def test_the_members_layers_declare_m_and_the_packed_layers_do_not():
    # The packed layers before PackedOutput hold every member in every row, whatever the
    # sample count: only the layers that read or write the tile layout declare M.
    for layer in (layers.EnsembleTile(3), layers.EnsembleUntile(3), layers.PackedOutput(3),
                  layers.BatchEnsembleDense(2, num_members=3),
                  layers.BatchEnsembleConv2D(2, 3, num_members=3)):
        assert isinstance(layer, _tiles.MembersLayer)
        assert layer.samples_multiple == layer.get_config()["num_members"] == 3
    for layer in (layers.PackedDense(6, num_members=3), layers.PackedConv2D(6, 3, num_members=3)):
        assert not isinstance(layer, _tiles.MembersLayer)
        assert not hasattr(layer, "samples_multiple")

"""PackedOutput: [B, ..., M * K] -> [B, M, ..., K]; inside `tfp_bnn.predict` sample s keeps
member s mod M's block."""

import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("middle", [(), (5, 4)], ids=["dense", "image"])
def test_block_m_of_the_last_axis_goes_to_column_m(middle):
    x = RNG.normal(size=(3,) + middle + (3 * 2,)).astype("float32")
    layer = layers.PackedOutput(3)
    out = ops.convert_to_numpy(layer(x))
    assert out.shape == (3, 3) + middle + (2,) == layer.compute_output_shape(x.shape)
    for m in range(3):
        np.testing.assert_array_equal(out[:, m], x[..., 2 * m:2 * m + 2])


@pytest.mark.parametrize("samples", [3, 6])
def test_inside_a_trace_sample_s_keeps_member_s_mod_m(samples):
    rows = 4
    x = RNG.normal(size=(samples * rows, 5, 3 * 2)).astype("float32")
    with sample_trace(samples):
        out = ops.convert_to_numpy(layers.PackedOutput(3)(x))
    assert out.shape == (samples * rows, 5, 2)
    for row in range(samples * rows):
        m = (row // rows) % 3
        np.testing.assert_array_equal(out[row], x[row, :, 2 * m:2 * m + 2])
    with sample_trace(4), pytest.raises(ValueError, match="PackedOutput is an ensemble of 3 "
                                                          "members.*got a call of 4 samples"):
        layers.PackedOutput(3)(x[:16])


def test_a_last_axis_that_is_not_m_blocks_is_refused():
    with pytest.raises(ValueError, match=r"PackedOutput splits the last axis into its 3 members "
                                         r"\(`num_members`\), got input shape \(2, 7\)"):
        layers.PackedOutput(3)(np.zeros((2, 7), "float32"))


def test_declares_the_sample_multiple_and_round_trips_its_config():
    checks.assert_declares_its_members(layers.PackedOutput, 4, (8,))

"""EnsembleUntile: [M * B, ...] -> [B, M, ...], member m at [:, m]; the identity inside
`tfp_bnn.predict`."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(4)


@pytest.mark.parametrize("tail", [(), (2,), (3, 2)])
def test_member_m_tile_goes_to_column_m(tail):
    x = RNG.normal(size=(12,) + tail).astype("float32")   # 3 tiles of 4 rows
    out = ops.convert_to_numpy(layers.EnsembleUntile(3)(x))
    assert out.shape == (4, 3) + tail
    for m in range(3):
        np.testing.assert_array_equal(out[:, m], x[m * 4:(m + 1) * 4])


def test_untile_inverts_tile():
    x = RNG.normal(size=(5, 2)).astype("float32")
    out = ops.convert_to_numpy(layers.EnsembleUntile(4)(layers.EnsembleTile(4)(x)))
    np.testing.assert_array_equal(out, np.stack([x] * 4, axis=1))


def test_symbolic_shapes():
    layer = layers.EnsembleUntile(2)
    assert layer.compute_output_shape((None, 3)) == (None, 2, 3)
    assert layer.compute_output_shape((8, 3)) == (4, 2, 3)
    assert layer(layers.EnsembleTile(2)(keras.Input((3,)))).shape == (None, 2, 3)


def test_inside_a_trace_the_outputs_pass_unchanged():
    x = RNG.normal(size=(12, 2)).astype("float32")
    layer = layers.EnsembleUntile(2)
    with sample_trace(4):
        np.testing.assert_array_equal(ops.convert_to_numpy(layer(x)), x)
    with sample_trace(3), pytest.raises(ValueError, match="EnsembleUntile is an ensemble of 2 "
                                                          "members.*got a call of 3 samples"):
        layer(x)


def test_a_batch_that_is_not_m_tiles_is_refused():
    with pytest.raises(ValueError, match="EnsembleUntile takes a batch of T = 3 tiles"):
        layers.EnsembleUntile(3)(np.zeros((4, 2), "float32"))


def test_declares_the_sample_multiple_and_round_trips_its_config():
    checks.assert_declares_its_members(layers.EnsembleUntile, 3, (6,))

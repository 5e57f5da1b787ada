"""EnsembleTile: [B, ...] -> [M * B, ...] member-major; the identity inside `tfp_bnn.predict`."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("shape", [(5,), (5, 2), (5, 3, 2, 1)])
def test_row_m_b_is_example_b(shape):
    x = RNG.normal(size=shape).astype("float32")
    out = ops.convert_to_numpy(layers.EnsembleTile(3)(x))
    assert out.shape == (15,) + shape[1:]
    for m in range(3):
        np.testing.assert_array_equal(out[m * 5:(m + 1) * 5], x)


def test_symbolic_shapes():
    layer = layers.EnsembleTile(4)
    assert layer.compute_output_shape((None, 3)) == (None, 3)
    assert layer.compute_output_shape((2, 3, 5)) == (8, 3, 5)
    assert layer(keras.Input((3,))).shape == (None, 3)


def test_inside_a_trace_the_batch_passes_unchanged():
    x = RNG.normal(size=(12, 2)).astype("float32")   # S = 6 tiles of 2 rows
    layer = layers.EnsembleTile(3)
    with sample_trace(6):
        np.testing.assert_array_equal(ops.convert_to_numpy(layer(x)), x)
    with sample_trace(3):   # S = M: still already tiled, not tiled again
        np.testing.assert_array_equal(ops.convert_to_numpy(layer(x)), x)
    with sample_trace(4), pytest.raises(ValueError, match="EnsembleTile is an ensemble of 3 "
                                                          "members.*multiple of 3, got a call "
                                                          "of 4 samples"):
        layer(x)


def test_declares_the_sample_multiple_and_round_trips_its_config():
    checks.assert_declares_its_members(layers.EnsembleTile, 5, (3,))


def test_bad_num_members_names_itself():
    for bad in (0, 2.5, "3", None):
        with pytest.raises(ValueError, match="`num_members` must be a positive int"):
            layers.EnsembleTile(bad)

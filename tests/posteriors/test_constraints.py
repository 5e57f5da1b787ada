"""ClipValue: the serializable clip of a weight, e.g. a posterior's rho."""

import keras
import numpy as np
import pytest

from tfp_bnn.posteriors import ClipValue


def test_clips_to_the_interval_in_the_weights_dtype():
    clipped = ClipValue(-1.0, 0.5)(np.array([-3.0, 0.0, 2.0], "float64"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clipped), [-1.0, 0.0, 0.5])
    assert keras.backend.standardize_dtype(clipped.dtype) == "float64"


@pytest.mark.jax
def test_round_trips_through_keras_constraints():
    restored = keras.constraints.deserialize(keras.constraints.serialize(ClipValue(-2.0, 1.0)))
    assert isinstance(restored, ClipValue)
    assert (restored.min_value, restored.max_value) == (-2.0, 1.0)


@pytest.mark.jax
def test_an_empty_interval_names_the_argument():
    with pytest.raises(ValueError, match="`max_value` must be"):
        ClipValue(1.0, 0.0)

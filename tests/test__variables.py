"""`tfp_bnn._variables.read`: a variable's value as a tensor, on every backend."""

import keras
import numpy as np
import pytest

from tfp_bnn import _variables

pytestmark = pytest.mark.jax


def test_read_gives_the_value_as_a_tensor_not_the_variable():
    variable = keras.Variable(np.array([1.0, -2.0], "float32"))
    value = _variables.read(variable)
    assert not isinstance(value, keras.Variable)
    assert keras.ops.is_tensor(value)
    # A snapshot: assigning afterwards does not change what was read.
    variable.assign([3.0, 4.0])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(value), [1.0, -2.0])


def test_read_passes_tensors_through():
    tensor = keras.ops.ones((2, 3))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(_variables.read(tensor)),
                                  np.ones((2, 3)))

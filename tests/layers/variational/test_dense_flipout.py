"""DenseFlipout: one kernel sample per call, decorrelated per example by random signs."""

import keras
import pytest

from tests.layers.variational import batteries
from tfp_bnn.layers import DenseFlipout

pytestmark = pytest.mark.jax


@pytest.mark.parametrize("extra", batteries.DENSE_SETTINGS)
def test_standard_battery(extra):
    batteries.check_dense(DenseFlipout, extra)


def test_standard_battery_on_rank3_inputs():
    batteries.check_dense(DenseFlipout, {}, (4, 2, 5))


def test_symbolic_input_with_unknown_last_dimension():
    with pytest.raises(ValueError, match="known last input dimension"):
        DenseFlipout(2)(keras.Input((None,)))

"""DenseReparameterization: one kernel sample per call, shared by the batch."""

import pytest

from tests.layers.variational import batteries
from tfp_bnn.layers import DenseReparameterization

pytestmark = pytest.mark.jax


@pytest.mark.parametrize("extra", batteries.DENSE_SETTINGS)
def test_standard_battery(extra):
    batteries.check_dense(DenseReparameterization, extra)


def test_standard_battery_on_rank3_inputs():
    batteries.check_dense(DenseReparameterization, {}, (4, 2, 5))

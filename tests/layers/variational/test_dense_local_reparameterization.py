"""DenseLocalReparameterization: the output distribution sampled per example."""

import pytest

from tests.layers.variational import batteries
from tfp_bnn.layers import DenseLocalReparameterization

pytestmark = pytest.mark.jax


@pytest.mark.parametrize("extra", batteries.DENSE_SETTINGS)
def test_standard_battery(extra):
    batteries.check_dense(DenseLocalReparameterization, extra)


def test_standard_battery_on_rank3_inputs():
    batteries.check_dense(DenseLocalReparameterization, {}, (4, 2, 5))

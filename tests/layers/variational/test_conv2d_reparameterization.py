"""Conv2DReparameterization: keras.layers.Conv2D's arguments, one kernel sample per call."""

import pytest

from tests.layers.variational import batteries
from tests.layers.variational import conv_nd_checks as checks
from tfp_bnn import layers


@pytest.mark.parametrize("extra", batteries.CONV2D_SETTINGS)
def test_standard_battery(extra):
    batteries.check_conv2d(layers.Conv2DReparameterization, extra)


@pytest.mark.parametrize("conv_kwargs", [
    # On JAX too: XLA's native channels_first against Keras' channels_last.
    pytest.param({"kernel_size": 3, "data_format": "channels_first", "padding": "same"},
                 id="channels_first_same", marks=pytest.mark.jax),
    pytest.param({"kernel_size": (3, 2), "strides": (2, 1), "groups": 2},
                 id="strided_grouped"),
])
def test_mean_mode_equals_keras_conv2d(conv_kwargs):
    checks.check_mean_mode_equals_keras(layers.Conv2DReparameterization, 2, conv_kwargs)

"""Conv3DFlipout: keras.layers.Conv3D's shapes and mean, the standard battery, sampling."""

import pytest

from tests.layers.variational import conv_nd_checks as checks
from tfp_bnn import layers
from tfp_bnn.testing import run_bayesian_layer_test

CLS = layers.Conv3DFlipout
RANK = 3
SETTINGS = [
    {"kernel_size": 3},
    {"kernel_size": (2, 3, 1), "padding": "same", "strides": (1, 2, 2)},
    {"kernel_size": 2, "dilation_rate": (2, 1, 2)},
    {"kernel_size": 3, "padding": "same", "data_format": "channels_first"},
    {"kernel_size": 2, "strides": 2, "groups": 2, "data_format": "channels_first"},
]
SETTING_IDS = ["valid", "same_strided", "dilated", "channels_first_same",
               "channels_first_strided_grouped"]


@pytest.mark.parametrize("conv_kwargs", SETTINGS, ids=SETTING_IDS)
def test_shapes_and_mean_mode_match_keras_conv3d(conv_kwargs):
    checks.check_mean_mode_equals_keras(CLS, RANK, conv_kwargs)


def test_standard_battery():
    # Config round trip, KL gradient, mean mode, seeds, a fit step, .keras under safe_mode.
    extra = {"padding": "same", "prior": "scale_mixture", "data_format": "channels_first",
             "bayesian_bias": True}
    run_bayesian_layer_test(CLS, dict(filters=2, kernel_size=2, kl_weight=0.01, **extra),
                            (2, 2, 5, 4, 3))


def test_keras_run_layer_test():
    checks.check_keras_harness(CLS, RANK, padding="same", dilation_rate=2)


def test_kl_is_added_once_per_call():
    checks.check_kl_once_per_call(CLS, RANK)


def test_predict_sample_shapes_and_mean_mode():
    # The sampled path is the same code for both estimators: each test file
    # takes one data format, so that both formats run for every rank.
    checks.check_predict_sample(CLS, RANK, "channels_last")


# On JAX one format: channels_first, which XLA convolves natively there.
@pytest.mark.parametrize("data_format", [
    "channels_last", pytest.param("channels_first", marks=pytest.mark.jax)])
def test_one_flipout_sign_per_example_and_channel(data_format):
    checks.check_flipout_signs(CLS, RANK, data_format)


def test_bad_arguments_name_themselves():
    checks.check_bad_arguments(CLS, RANK)

"""Conv1DReparameterization: Conv1D's shapes and mean, the standard battery, sampling."""

import pytest

from tests.layers.variational import conv_nd_checks as checks
from tfp_bnn import layers
from tfp_bnn.testing import run_bayesian_layer_test

CLS = layers.Conv1DReparameterization
RANK = 1
DATA_FORMATS = ["channels_last", "channels_first"]
SETTINGS = [
    {"kernel_size": 3},
    {"kernel_size": 4, "padding": "same", "strides": 2},
    {"kernel_size": 3, "padding": "causal", "dilation_rate": 2},
    {"kernel_size": 2, "strides": 3, "data_format": "channels_first"},
    {"kernel_size": 3, "padding": "causal", "data_format": "channels_first"},
    {"kernel_size": 3, "padding": "same", "groups": 2},
]
SETTING_IDS = ["valid", "same_strided", "causal_dilated", "channels_first_strided",
               "channels_first_causal", "grouped"]


@pytest.mark.parametrize("conv_kwargs", SETTINGS, ids=SETTING_IDS)
def test_shapes_and_mean_mode_match_keras_conv1d(conv_kwargs):
    checks.check_mean_mode_equals_keras(CLS, RANK, conv_kwargs)


def test_standard_battery():
    # Config round trip, KL gradient, mean mode, seeds, a fit step, .keras under safe_mode.
    extra = {"padding": "causal", "dilation_rate": 2, "data_format": "channels_first",
             "bayesian_bias": True}
    run_bayesian_layer_test(CLS, dict(filters=2, kernel_size=2, kl_weight=0.01, **extra),
                            (3, 2, 8))


def test_keras_run_layer_test():
    checks.check_keras_harness(CLS, RANK, strides=2, data_format="channels_first")


def test_kl_is_added_once_per_call():
    checks.check_kl_once_per_call(CLS, RANK)


def test_predict_sample_shapes_and_mean_mode():
    # The sampled path is the same code for both estimators: each test file
    # takes one data format, so that both formats run for every rank.
    checks.check_predict_sample(CLS, RANK, "channels_last")


def test_bad_arguments_name_themselves():
    checks.check_bad_arguments(CLS, RANK)

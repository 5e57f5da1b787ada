"""GRUCellReparameterization: one weight sample per sequence, Keras's GRU in mean mode.

The checks shared with the LSTM cell live in tests/layers/recurrent/recurrent_checks.py;
the expensive ones run in the LSTM cell's test file only (same base class,
see there).
"""

import keras
import pytest

from tests.layers.recurrent import recurrent_checks as checks
from tfp_bnn.layers import GRUCellReparameterization


@pytest.mark.parametrize("check", [
    checks.check_kl_once_per_pass, checks.check_masking_within_a_pass])
def test_shared_checks(check):
    check(GRUCellReparameterization)


@pytest.mark.parametrize("kwargs", [
    {}, {"reset_after": False, "bayesian_bias": True, "activation": "relu"}],
    ids=["reset_after", "reset_before_bayesian_bias_relu"])
def test_mean_mode_matches_keras_gru(kwargs):
    checks.check_matches_keras(GRUCellReparameterization, keras.layers.GRU, **kwargs)


def test_one_draw_for_all_steps():
    checks.check_one_draw_for_all_steps(GRUCellReparameterization, keras.layers.GRU)


def test_sample_trace_applies_one_sample_per_tile():
    checks.check_sample_trace(GRUCellReparameterization, keras.layers.GRU)


def test_bias_shape_and_inspection():
    cell = GRUCellReparameterization(2, bayesian_bias=True)
    cell.build((None, 3))
    assert cell.bias_posterior.event_shape == (2, 6)
    assert cell.recurrent_kernel_posterior.event_shape == (2, 6)
    flat = GRUCellReparameterization(2, reset_after=False)
    flat.build((None, 3))
    assert tuple(flat.bias.shape) == (6,)


@pytest.mark.parametrize("kwargs, message", [
    ({"units": -1}, "units"), ({"units": 2, "recurrent_dropout": -0.1}, "recurrent_dropout"),
    ({"units": 2, "reset_after": "yes"}, "reset_after")])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GRUCellReparameterization(**kwargs)

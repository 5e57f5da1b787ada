"""GRUCellFlipout: per-example weights fixed over a sequence, Keras's GRU in mean mode.

The checks shared with the other recurrent cells live in
tests/layers/recurrent/recurrent_checks.py; the expensive ones run in
test_lstm_cell_flipout.py only (same base class, see there). Both GRU
layouts are compared with Keras, row by row: reset_after=False slices the
recurrent Flipout kernel into two matmuls.
"""

import keras
import pytest

from tests.layers.recurrent import recurrent_checks as checks
from tfp_bnn.layers import GRUCellFlipout
from tfp_bnn.layers import GRUCellReparameterization

LAYOUTS = [{}, {"reset_after": False, "bayesian_bias": True, "activation": "relu"}]
IDS = ["reset_after", "reset_before_bayesian_bias_relu"]


@pytest.mark.parametrize("check", [
    checks.check_kl_once_per_pass, checks.check_masking_within_a_pass])
def test_shared_checks(check):
    check(GRUCellFlipout)


@pytest.mark.parametrize("kwargs", LAYOUTS, ids=IDS)
def test_mean_mode_matches_keras_gru(kwargs):
    checks.check_matches_keras(GRUCellFlipout, keras.layers.GRU, **kwargs)


@pytest.mark.parametrize("kwargs", LAYOUTS, ids=IDS)
def test_rows_keep_their_own_weights_over_the_pass(kwargs):
    checks.check_one_draw_for_all_steps(GRUCellFlipout, keras.layers.GRU, **kwargs)


def test_per_example_variance_matches_reparameterization():
    checks.check_flipout_variance(GRUCellFlipout, GRUCellReparameterization)


def test_sample_trace_applies_one_sample_per_tile():
    checks.check_sample_trace(GRUCellFlipout, keras.layers.GRU)


@pytest.mark.parametrize("kwargs, message", [
    ({"units": -1}, "units"), ({"units": 2, "recurrent_dropout": -0.1}, "recurrent_dropout"),
    ({"units": 2, "reset_after": "yes"}, "reset_after")])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GRUCellFlipout(**kwargs)

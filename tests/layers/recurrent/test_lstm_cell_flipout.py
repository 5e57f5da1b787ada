"""LSTMCellFlipout: per-example weights fixed over a sequence, Keras's LSTM in mean mode.

The checks shared with the other recurrent cells live in
tests/layers/recurrent/recurrent_checks.py. As for the reparameterization cells, the
expensive ones (Keras's harness with its training step and mixed precision,
the traced KL count, training with KLScheduler and the `.keras` round trip)
run on the LSTM cell only: the GRU cell shares every line of that code path
(`tfp_bnn/layers/recurrent/_recurrent_cell.py`) but its gates, which its mean-mode and
per-row comparisons with `keras.layers.GRU` cover.

The per-row check is marked `jax` and runs on every Keras backend: there it
is the check of Flipout, of the one draw per pass and of masking while
sampling. The other JAX checks run on `LSTMCellReparameterization`: every
cell configuration a JAX test builds costs its own compilations (about 3 s
on 2 cores), so the JAX tests share one gate layout, the LSTM's.
"""

import keras
import pytest

from tests.layers.recurrent import recurrent_checks as checks
from tfp_bnn.layers import LSTMCellFlipout
from tfp_bnn.layers import LSTMCellReparameterization
from tfp_bnn.posteriors import FlowPosterior


def test_keras_harness():
    checks.check_keras_harness(LSTMCellFlipout)


def test_kl_once_per_pass_traced():
    checks.check_kl_once_per_pass(LSTMCellFlipout, traced=True)


@pytest.mark.parametrize("kwargs", [{}, {"bayesian_bias": True, "unit_forget_bias": False}],
                         ids=["default", "bayesian_bias"])
def test_mean_mode_matches_keras_lstm(kwargs):
    checks.check_matches_keras(LSTMCellFlipout, keras.layers.LSTM, **kwargs)


@pytest.mark.jax
def test_rows_keep_their_own_weights_over_the_pass():
    checks.check_one_draw_for_all_steps(LSTMCellFlipout, keras.layers.LSTM)


def test_per_example_variance_matches_reparameterization():
    checks.check_flipout_variance(LSTMCellFlipout, LSTMCellReparameterization)


def test_masking_within_a_pass():
    checks.check_masking_within_a_pass(LSTMCellFlipout)


def test_sample_trace_applies_one_sample_per_tile():
    checks.check_sample_trace(LSTMCellFlipout, keras.layers.LSTM)


def test_fit_with_kl_scheduler_and_save():
    checks.check_fit_and_save_with_embedding(LSTMCellFlipout)


@pytest.mark.parametrize("kwargs, message", [
    ({"units": 0}, "units"), ({"units": 2, "dropout": 1.5}, "dropout"),
    ({"units": 2, "unit_forget_bias": "yes"}, "unit_forget_bias"),
    ({"units": 2, "posterior": FlowPosterior()}, "location-scale")])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LSTMCellFlipout(**kwargs)

"""LSTMCellReparameterization: one weight sample per sequence, Keras's LSTM in mean mode.

The checks shared with the GRU cell live in tests/layers/recurrent/recurrent_checks.py.
The expensive ones (Keras's harness with its training step and mixed
precision, the traced KL count, training with KLScheduler and the `.keras`
round trip) run here only: the GRU cell shares every line of that code path
(`tfp_bnn/layers/recurrent/_recurrent_cell.py`) and differs only in its gates, which
its mean-mode comparison with `keras.layers.GRU` covers.

The tests marked `jax` run on every Keras backend: on JAX `keras.layers.RNN`
runs the cell inside `jax.lax.scan`, with the weights drawn and the KL added
before the loop, as on TensorFlow. The Flipout cells' JAX check is in
test_lstm_cell_flipout.py; the GRU cells differ only in their gates, written
in `keras.ops` alike, and are checked on TensorFlow.
"""

import keras
import numpy as np
import pytest

from tests.layers.recurrent import recurrent_checks as checks
from tfp_bnn.layers import LSTMCellReparameterization


@pytest.mark.jax
def test_keras_harness():
    checks.check_keras_harness(LSTMCellReparameterization)


def test_kl_once_per_pass_traced():
    checks.check_kl_once_per_pass(LSTMCellReparameterization, traced=True)


@pytest.mark.jax
def test_kl_once_per_compiled_step():
    checks.check_kl_once_per_compiled_step(LSTMCellReparameterization)


@pytest.mark.parametrize("kwargs", [{}, {"bayesian_bias": True, "unit_forget_bias": False}],
                         ids=["default", "bayesian_bias"])
def test_mean_mode_matches_keras_lstm(kwargs):
    checks.check_matches_keras(LSTMCellReparameterization, keras.layers.LSTM, **kwargs)


def test_masking_within_a_pass():
    checks.check_masking_within_a_pass(LSTMCellReparameterization)


@pytest.mark.jax
def test_seeded_determinism():
    checks.check_seeded_determinism(LSTMCellReparameterization)


def test_sample_trace_applies_one_sample_per_tile():
    checks.check_sample_trace(LSTMCellReparameterization, keras.layers.LSTM)


@pytest.mark.jax
def test_fit_with_kl_scheduler_and_save():
    checks.check_fit_and_save_with_embedding(LSTMCellReparameterization)


def test_unit_forget_bias_and_inspection():
    cell = LSTMCellReparameterization(2, seed=0)
    cell.build((None, 3))
    np.testing.assert_array_equal(cell.bias.numpy(), [0, 0, 1, 1, 0, 0, 0, 0])
    assert cell.recurrent_kernel_posterior.event_shape == (2, 8)
    assert cell.recurrent_kernel_prior.event_shape == (2, 8)
    assert cell.kernel_posterior.event_shape == (3, 8)


@pytest.mark.parametrize("kwargs, message", [
    ({"units": 0}, "units"), ({"units": 2, "dropout": 1.5}, "dropout"),
    ({"units": 2, "unit_forget_bias": "yes"}, "unit_forget_bias")])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        LSTMCellReparameterization(**kwargs)

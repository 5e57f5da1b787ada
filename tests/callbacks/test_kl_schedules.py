"""KL-weight schedules: values, averages and validation."""

import math

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import kl_schedules as ks

pytestmark = pytest.mark.jax


def test_constant_is_one():
    assert ks.ConstantSchedule().factor(3, 7, 10) == 1.0


def test_linear_warmup_ramps_then_holds():
    s = ks.LinearWarmup(epochs=2)
    values = [s.factor(e, b, 4) for e in range(3) for b in range(4)]
    np.testing.assert_allclose(values[:8], np.arange(8) / 8)
    assert values[8:] == [1.0] * 4


def test_cyclical_restarts_every_cycle():
    s = ks.CyclicalSchedule(cycle_epochs=1, ramp_fraction=0.5)
    first = [s.factor(0, b, 4) for b in range(4)]
    second = [s.factor(1, b, 4) for b in range(4)]
    assert first == second == [0.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize("m", [1, 2, 10, 50, 2000])
def test_blundell_weights_are_pi_i_times_m(m):
    s = ks.BlundellSchedule()
    factors = np.array([s.factor(0, b, m) for b in range(m)])
    # pi_i = 2^(M-i) / (2^M - 1): sums to one over the epoch.
    assert factors.sum() / m == pytest.approx(1.0, rel=1e-12)
    if m <= 50:
        pis = np.array([2.0 ** (m - i) / (2.0**m - 1) for i in range(1, m + 1)])
        np.testing.assert_allclose(factors / m, pis, rtol=1e-12)
    assert np.all(np.isfinite(factors)) and np.all(np.diff(factors) <= 0)


def test_serialization_round_trip():
    s = ks.CyclicalSchedule(cycle_epochs=3, ramp_fraction=0.25)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(s))
    assert isinstance(restored, ks.CyclicalSchedule) and restored.get_config() == s.get_config()


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: ks.LinearWarmup(epochs=0), "epochs"),
        (lambda: ks.LinearWarmup(epochs=math.inf), "epochs"),
        (lambda: ks.CyclicalSchedule(cycle_epochs=-1), "cycle_epochs"),
        (lambda: ks.CyclicalSchedule(ramp_fraction=0.0), "ramp_fraction"),
        (lambda: ks.get("exponential"), "schedule"),
    ],
)
def test_invalid_arguments_name_the_argument(make, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        make()

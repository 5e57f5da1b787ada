"""Tests of zoo.run.auto_conformal: the guard rows' conformal intervals against the same
computation done by hand with the conformal quantile, and the too-few-rows case."""

import math

import keras
import numpy as np
import pytest

from tfp_bnn.data import Standardizer
from tfp_bnn.predict import RegressionPrediction
from zoo.run import auto_conformal
from zoo.run import scoring
from zoo.run.auto_stack import Stack


class Exact(keras.Model):
    """A deterministic heteroscedastic 'network': mean x0, log variance 2 log(0.5 + |x1|)."""

    def call(self, inputs):
        return keras.ops.stack([inputs[:, 0],
                                2.0 * keras.ops.log(0.5 + keras.ops.abs(inputs[:, 1]))], axis=-1)


def _rows(n, rng):
    x = rng.normal(size=(n, 2))
    return x, x[:, 0] + 1.3 * (0.5 + np.abs(x[:, 1])) * rng.normal(size=n)


def test_the_intervals_are_the_normalised_split_conformal_ones():
    rng = np.random.default_rng(0)
    model = Exact()
    model(np.zeros((1, 2), "float32"))
    identity_x, identity_y = Standardizer(), Standardizer()
    identity_x.mean, identity_x.std = np.zeros(2), np.ones(2)
    identity_y.mean, identity_y.std = np.float64(0.0), np.float64(1.0)
    x_guard, y_guard = _rows(99, rng)
    x_test, y_test = _rows(2000, rng)
    stack = Stack([model], [1.0], identity_x, identity_y)
    test_prediction = scoring.predict_in_data_units(model, x_test, identity_x, identity_y, 1)
    record = auto_conformal.conformal_scores(stack, x_guard, y_guard, test_prediction, y_test,
                                             num_samples=1)
    # By hand: scores |y - mu| / sigma on the guard rows, their ceil(100 * 0.9) = 90th
    # smallest, the test intervals mu +- Q sigma.
    sigma_guard = 0.5 + np.abs(x_guard[:, 1])
    quantile = np.sort(np.abs(y_guard - x_guard[:, 0]) / sigma_guard)[89]
    sigma_test = 0.5 + np.abs(x_test[:, 1])
    covered = np.abs(y_test - x_test[:, 0]) <= quantile * sigma_test
    assert record["calibration_rows"] == 99
    assert record["conformal_coverage"] == pytest.approx(covered.mean(), abs=1e-12)
    assert record["conformal_width"] == pytest.approx(np.mean(2 * quantile * sigma_test),
                                                      rel=1e-5)
    # The model's own 90% interval is too narrow (its sd is 1/1.3 of the noise's): it
    # covers 2 Phi(1.645 / 1.3) - 1 = 0.794 of the rows; the conformal one ~0.9. Tolerance:
    # 4 binomial s.e. on 2,000 rows, plus the calibration set's spread for the conformal.
    assert record["model_coverage"] == pytest.approx(0.794, abs=4 * math.sqrt(0.16 / 2000))
    assert record["conformal_coverage"] > record["model_coverage"] + 0.05


def test_too_few_guard_rows_give_no_interval():
    prediction = RegressionPrediction(np.zeros((1, 3)), np.ones((1, 3)))
    assert auto_conformal.conformal_scores(None, np.zeros((8, 2)), np.zeros(8), prediction,
                                           np.zeros(3), num_samples=1) is None

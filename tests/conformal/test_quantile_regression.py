"""`ConformalizedQuantileRegressor` (`tfp_bnn/conformal/quantile_regression.py`): CQR's
coverage law over 2,000 calibration sets, its quantile against a plain sort, widening and
narrowing, crossing quantiles, infinite intervals, `RegressionPrediction` input, config
round trips and bad input.
"""

import json
import math

import keras
import numpy as np
import pytest

from tests.conformal import coverage_checks
from tfp_bnn import conformal
from tfp_bnn.predict import RegressionPrediction

pytestmark = pytest.mark.jax

N_CAL = coverage_checks.CALIBRATION
ALPHA = coverage_checks.ALPHA


def _data(seed, shape):
    """(y, lower, upper): y = x + x^2 noise with a quantile band that is wrong in shape
    (constant width 0.5 around 0.9 x), so the calibration has work to do."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 2.0, size=shape)
    y = x + x ** 2 * rng.standard_t(5, size=shape)
    return y, 0.9 * x - 0.25, 0.9 * x + 0.25


def test_coverage_follows_the_beta_binomial_law():
    shape = (coverage_checks.SEEDS, N_CAL + coverage_checks.TEST_POINTS)
    y, lower, upper = _data(21, shape)
    cqr = conformal.ConformalizedQuantileRegressor(alpha=ALPHA)
    covered = np.empty((shape[0], coverage_checks.TEST_POINTS), dtype=bool)
    for seed in range(shape[0]):
        cqr.fit(y[seed, :N_CAL], lower[seed, :N_CAL], upper[seed, :N_CAL])
        low, high = cqr.predict_interval(lower[seed, N_CAL:], upper[seed, N_CAL:])
        covered[seed] = (low <= y[seed, N_CAL:]) & (y[seed, N_CAL:] <= high)
    coverage_checks.assert_coverage_law(coverage_checks.covered_fraction(covered))


def test_quantile_and_interval_from_a_plain_sort():
    y, lower, upper = _data(1, 45)
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.3).fit(y, lower, upper)
    scores = np.array([max(lo - t, t - hi) for t, lo, hi in zip(y, lower, upper)])
    k = math.ceil(46 * 0.7)   # 33
    assert cqr.quantile == np.sort(scores)[k - 1]
    test_lower, test_upper = cqr.predict_interval(lower[:4], upper[:4])
    np.testing.assert_array_equal(test_lower, lower[:4] - cqr.quantile)
    np.testing.assert_array_equal(test_upper, upper[:4] + cqr.quantile)


def test_a_band_too_wide_is_narrowed():
    rng = np.random.default_rng(2)
    y = rng.normal(size=500)
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.2).fit(
        y, np.full(500, -5.0), np.full(500, 5.0))
    # Every score is negative: max(-5 - y, y - 5); Q = -(5 - the 80% quantile of |y|).
    assert -5.0 < cqr.quantile < 0.0
    lower, upper = cqr.predict_interval([-5.0], [5.0])
    assert -5.0 < lower[0] < upper[0] < 5.0


def test_crossing_quantiles_are_allowed():
    # q_lo > q_hi: the scores still rank the rows, and the guarantee holds.
    y = np.arange(10.0)
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.1).fit(
        y, np.full(10, 6.0), np.full(10, 4.0))
    scores = np.maximum(6.0 - y, y - 4.0)          # 6 5 4 3 2 1 2 3 4 5
    assert cqr.quantile == np.sort(scores)[9]      # k = ceil(11 * 0.9) = 10
    lower, upper = cqr.predict_interval([6.0], [4.0])
    assert (lower[0], upper[0]) == (0.0, 10.0)
    narrow = conformal.ConformalizedQuantileRegressor(alpha=0.5).fit(
        y[4:7], np.full(3, 6.0), np.full(3, 4.0))  # scores 2 1 2, k = 2: Q = 2
    lower, upper = narrow.predict_interval([9.0], [4.0])
    assert lower[0] > upper[0]                      # an empty interval: width 0
    assert conformal.mean_width(lower, upper) == 0.0


def test_too_few_calibration_rows_give_infinite_intervals():
    y, lower, upper = _data(3, 18)   # n = 18 < 1 / 0.05 - 1
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.05)
    with pytest.warns(UserWarning, match=r"n = 18 calibration rows.*every interval is "
                                         r"\(-inf, inf\).*at least 19 rows"):
        cqr.fit(y, lower, upper)
    low, high = cqr.predict_interval(lower[:2], upper[:2])
    np.testing.assert_array_equal(low, [-np.inf, -np.inf])
    np.testing.assert_array_equal(high, [np.inf, np.inf])


def _prediction(seed, points, scale):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(3, points))
    prediction = RegressionPrediction(means, np.full((3, points), 0.5))
    return prediction, prediction.mean + scale * rng.normal(size=points)


def test_from_prediction_conformalizes_the_central_interval():
    prediction, y = _prediction(0, 300, scale=2.0)   # the predictive is too narrow
    cqr = conformal.ConformalizedQuantileRegressor.from_prediction(prediction, y, alpha=0.2)
    lower, upper = prediction.interval(0.8)
    direct = conformal.ConformalizedQuantileRegressor(alpha=0.2).fit(y, lower, upper)
    assert cqr.quantile == direct.quantile > 0
    test, _ = _prediction(1, 25, scale=2.0)
    expected = direct.predict_interval(*test.interval(0.8))
    for got, want in zip(cqr.interval(test), expected):
        np.testing.assert_array_equal(got, want)


def test_config_round_trip():
    y, lower, upper = _data(4, 30)
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.2).fit(y, lower, upper)
    config = cqr.get_config()
    assert config == {"alpha": 0.2, "calibration_size": 30, "quantile": cqr.quantile}
    restored = conformal.ConformalizedQuantileRegressor.from_config(
        json.loads(json.dumps(config, allow_nan=False)))
    np.testing.assert_array_equal(restored.predict_interval(lower, upper),
                                  cqr.predict_interval(lower, upper))
    serialized = keras.saving.serialize_keras_object(cqr)
    assert serialized["registered_name"] == "tfp_bnn>ConformalizedQuantileRegressor"
    again = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    assert again.get_config() == config


def test_not_fitted():
    cqr = conformal.ConformalizedQuantileRegressor()
    with pytest.raises(ValueError, match=r"This ConformalizedQuantileRegressor is not fitted: "
                                         r"call fit\(\) before predict_interval"):
        cqr.predict_interval([0.0], [1.0])
    with pytest.raises(ValueError, match=r"not fitted: call fit\(\) before interval"):
        cqr.interval(_prediction(0, 3, 1.0)[0])


Y, LOWER, UPPER = np.array([0.5, 1.0, -0.3]), np.array([0.0, 0.2, -1.0]), np.array([1.0, 2.0, 0.0])


@pytest.mark.parametrize("arguments, pattern", [
    ((Y[:2], LOWER, UPPER), r"`y` has 2 rows but `lower` has 3"),
    ((Y, LOWER, UPPER[:2]), r"`upper` has 2 rows but `lower` has 3"),
    ((Y, LOWER[None], UPPER), r"`lower` must be 1-D, got shape \(1, 3\)"),
    ((Y, LOWER, np.array([1.0, np.nan, 0.0])), r"`upper` must be finite, got nan at index 1"),
    ((np.array([np.inf, 1.0, 0.0]), LOWER, UPPER), r"`y` must be finite, got inf at index 0"),
    ((Y, [], []), r"`lower` is empty"),
])
def test_bad_fit_input(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.ConformalizedQuantileRegressor().fit(*arguments)


def test_bad_predict_and_prediction_input():
    cqr = conformal.ConformalizedQuantileRegressor(alpha=0.5).fit(Y, LOWER, UPPER)
    with pytest.raises(ValueError, match=r"`upper` has 1 rows but `lower` has 2"):
        cqr.predict_interval([0.0, 1.0], [1.0])
    with pytest.raises(ValueError, match=r"`prediction` must be a "
                                         r"tfp_bnn.predict.RegressionPrediction, got tuple"):
        cqr.interval((LOWER, UPPER))
    two_outputs = RegressionPrediction(np.zeros((2, 4, 2)), np.ones((2, 4, 2)))
    with pytest.raises(ValueError, match=r"`prediction` has 2 outputs per point"):
        conformal.ConformalizedQuantileRegressor.from_prediction(two_outputs, np.zeros(4))
    with pytest.raises(ValueError, match=r"`alpha` must be a number in \(0, 1\), got 1"):
        conformal.ConformalizedQuantileRegressor(alpha=1)

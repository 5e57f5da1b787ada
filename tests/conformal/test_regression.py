"""`SplitConformalRegressor` (`tfp_bnn/conformal/regression.py`): its coverage law over
2,000 calibration sets for both scores, its quantile against a plain sort, infinite
intervals, the normalized score's adaptive width, `RegressionPrediction` input, config
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


def _heteroscedastic(seed, shape):
    """(x, y, sd): y = sin(x) + sd(x) * noise, sd = 0.2 + 0.5 |x|, x ~ U(-2, 2)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, size=shape)
    sd = 0.2 + 0.5 * np.abs(x)
    return x, np.sin(x) + sd * rng.normal(size=shape), sd


def _per_seed_coverage(score):
    """Coverage on TEST_POINTS points for each of SEEDS calibration sets of N_CAL rows.

    The model is misspecified (mean 0.8 sin x, sd 1.5 times too wide where x > 0): the
    guarantee holds whatever the model.
    """
    shape = (coverage_checks.SEEDS, N_CAL + coverage_checks.TEST_POINTS)
    x, y, sd = _heteroscedastic(11, shape)
    mean = 0.8 * np.sin(x)
    scale = np.where(x > 0, 1.5 * sd, sd) if score == "normalized" else None
    regressor = conformal.SplitConformalRegressor(alpha=ALPHA, score=score)
    covered = np.empty((shape[0], coverage_checks.TEST_POINTS), dtype=bool)
    for seed in range(shape[0]):
        cal, test = slice(0, N_CAL), slice(N_CAL, None)
        regressor.fit(y[seed, cal], mean[seed, cal],
                      None if scale is None else scale[seed, cal])
        lower, upper = regressor.predict_interval(
            mean[seed, test], None if scale is None else scale[seed, test])
        covered[seed] = (lower <= y[seed, test]) & (y[seed, test] <= upper)
    return coverage_checks.covered_fraction(covered)


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_coverage_follows_the_beta_binomial_law(score):
    coverage_checks.assert_coverage_law(_per_seed_coverage(score))


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_quantile_and_interval_from_a_plain_sort(score):
    x, y, sd = _heteroscedastic(3, 57)
    mean = np.cos(x)
    scale = sd if score == "normalized" else None
    regressor = conformal.SplitConformalRegressor(alpha=0.2, score=score).fit(y, mean, scale)
    residual = np.abs(y - mean) / (sd if score == "normalized" else 1.0)
    k = math.ceil(58 * 0.8)   # 47
    assert regressor.quantile == np.sort(residual)[k - 1]
    assert regressor.calibration_size == 57
    lower, upper = regressor.predict_interval(mean[:5], None if scale is None else scale[:5])
    half = regressor.quantile * (sd[:5] if score == "normalized" else 1.0)
    np.testing.assert_array_equal(lower, mean[:5] - half)
    np.testing.assert_array_equal(upper, mean[:5] + half)


def test_too_few_calibration_rows_give_infinite_intervals():
    x, y, _ = _heteroscedastic(4, 8)   # n = 8 < 1 / 0.1 - 1
    regressor = conformal.SplitConformalRegressor(alpha=0.1)
    with pytest.warns(UserWarning, match=r"n = 8 calibration rows.*every interval is "
                                         r"\(-inf, inf\).*at least 9 rows"):
        regressor.fit(y, np.sin(x))
    assert regressor.quantile == math.inf
    lower, upper = regressor.predict_interval(np.array([0.0, 1.0]))
    np.testing.assert_array_equal(lower, [-np.inf, -np.inf])
    np.testing.assert_array_equal(upper, [np.inf, np.inf])
    assert conformal.coverage([5.0, -7.0], lower, upper) == 1.0
    assert conformal.mean_width(lower, upper) == math.inf
    restored = conformal.SplitConformalRegressor.from_config(
        json.loads(json.dumps(regressor.get_config(), allow_nan=False)))
    assert restored.quantile == math.inf
    # One more row (n = 9) makes the quantile finite: the largest score.
    x, y, _ = _heteroscedastic(4, 9)
    regressor.fit(y, np.sin(x))
    assert regressor.quantile == np.max(np.abs(y - np.sin(x)))


def test_normalized_intervals_follow_the_noise():
    # One large calibration set; the model knows the noise sd.
    x, y, sd = _heteroscedastic(5, 4000)
    mean = np.sin(x)
    absolute = conformal.SplitConformalRegressor(alpha=ALPHA).fit(y[:2000], mean[:2000])
    normalized = conformal.SplitConformalRegressor(alpha=ALPHA, score="normalized").fit(
        y[:2000], mean[:2000], sd[:2000])
    a_lower, a_upper = absolute.predict_interval(mean[2000:])
    n_lower, n_upper = normalized.predict_interval(mean[2000:], sd[2000:])
    a_width, n_width = a_upper - a_lower, n_upper - n_lower
    calm, noisy = sd[2000:] < 0.4, sd[2000:] > 1.0   # |x| < 0.4 and |x| > 1.6
    assert calm.sum() > 300 and noisy.sum() > 300
    # Where sigma is small the normalized interval is narrower, where large wider.
    assert np.all(n_width[calm] < a_width[calm])
    assert np.all(n_width[noisy] > a_width[noisy])
    # The absolute score pays for it: it under-covers the noisy points, while the
    # normalized score's coverage does not depend on x here (its score |y - mu| / sd is
    # |N(0, 1)| everywhere). The tolerance: the binomial variance of the noisy points'
    # fraction plus the Beta(k, n + 1 - k) variance of the coverage given the calibration.
    n, k = 2000, coverage_checks.rank(2000, ALPHA)
    exact = k / (n + 1)
    beta_variance = k * (n + 1 - k) / ((n + 1) ** 2 * (n + 2))
    se = math.sqrt(exact * (1 - exact) / noisy.sum() + beta_variance)
    a_covered = (a_lower <= y[2000:]) & (y[2000:] <= a_upper)
    n_covered = (n_lower <= y[2000:]) & (y[2000:] <= n_upper)
    assert a_covered[noisy].mean() < exact - 4 * se
    assert abs(n_covered[noisy].mean() - exact) < 4 * se


def _prediction(seed, points, outputs=None):
    """A RegressionPrediction of T = 4 samples with noise, and targets drawn from it."""
    rng = np.random.default_rng(seed)
    shape = (4, points) if outputs is None else (4, points, outputs)
    means = rng.normal(size=shape)
    variances = rng.uniform(0.2, 1.0, size=shape)
    prediction = RegressionPrediction(means, variances)
    y = prediction.mean + prediction.stddev * rng.normal(size=prediction.mean.shape)
    return prediction, y


@pytest.mark.parametrize("score", ["absolute", "normalized"])
@pytest.mark.parametrize("outputs", [None, 1])
def test_from_prediction_is_fit_on_mean_and_stddev(score, outputs):
    prediction, y = _prediction(0, 200, outputs)
    fitted = conformal.SplitConformalRegressor.from_prediction(
        prediction, y.reshape(-1), alpha=0.2, score=score)
    mean, stddev = prediction.mean.reshape(-1), np.sqrt(prediction.total_variance).reshape(-1)
    direct = conformal.SplitConformalRegressor(alpha=0.2, score=score).fit(
        y.reshape(-1), mean, stddev if score == "normalized" else None)
    assert fitted.quantile == direct.quantile
    test, _ = _prediction(1, 30, outputs)
    expected = direct.predict_interval(
        test.mean.reshape(-1), test.stddev.reshape(-1) if score == "normalized" else None)
    for got, want in zip(fitted.interval(test), expected):
        np.testing.assert_array_equal(got, want)


def test_from_prediction_defaults_to_the_normalized_score():
    prediction, y = _prediction(2, 50)
    assert conformal.SplitConformalRegressor.from_prediction(prediction, y).score == "normalized"


@pytest.mark.parametrize("score", ["absolute", "normalized"])
def test_config_round_trip(score):
    x, y, sd = _heteroscedastic(6, 40)
    regressor = conformal.SplitConformalRegressor(alpha=0.05, score=score).fit(
        y, np.sin(x), sd if score == "normalized" else None)
    config = regressor.get_config()
    assert config == {"alpha": 0.05, "calibration_size": 40,
                      "quantile": regressor.quantile, "score": score}
    restored = conformal.SplitConformalRegressor.from_config(
        json.loads(json.dumps(config, allow_nan=False)))
    assert restored.get_config() == config
    arrays = (np.sin(x), sd if score == "normalized" else None)
    np.testing.assert_array_equal(restored.predict_interval(*arrays),
                                  regressor.predict_interval(*arrays))
    # Keras' own serialization, as for the package's other registered objects.
    serialized = keras.saving.serialize_keras_object(regressor)
    assert serialized["registered_name"] == "tfp_bnn>SplitConformalRegressor"
    again = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)),
                                                 safe_mode=True)
    assert isinstance(again, conformal.SplitConformalRegressor)
    assert again.get_config() == config
    assert repr(again).startswith(f"SplitConformalRegressor(alpha=0.05, score='{score}'; "
                                  f"quantile=")


def test_unfitted_config_round_trip():
    config = conformal.SplitConformalRegressor(score="normalized").get_config()
    assert config == {"alpha": 0.1, "calibration_size": None, "quantile": None,
                      "score": "normalized"}
    assert not conformal.SplitConformalRegressor.from_config(config).fitted


def test_not_fitted():
    regressor = conformal.SplitConformalRegressor()
    for call in (lambda: regressor.predict_interval([0.0]), lambda: regressor.quantile,
                 lambda: regressor.interval(_prediction(0, 3)[0])):
        with pytest.raises(ValueError, match=r"This SplitConformalRegressor is not fitted: "
                                             r"call fit\(\) before"):
            call()


Y, MEAN, SCALE = np.array([0.5, 1.0, -0.3]), np.array([0.0, 1.2, 0.1]), np.array([1.0, 0.5, 2.0])


@pytest.mark.parametrize("score, arguments, pattern", [
    ("absolute", (Y[:2], MEAN), r"`y` has 2 rows but `mean` has 3"),
    ("absolute", (Y, MEAN[None]), r"`mean` must be 1-D, got shape \(1, 3\)"),
    ("absolute", (np.array([0.5, np.nan, 1.0]), MEAN), r"`y` must be finite, got nan at "
                                                       r"index 1"),
    ("absolute", (Y, np.array([0.0, np.inf, 1.0])), r"`mean` must be finite, got inf at "
                                                    r"index 1"),
    ("absolute", ([], []), r"`mean` is empty"),
    ("absolute", (Y, ["a", "b", "c"]), r"`mean` must be numeric"),
    ("absolute", (Y, MEAN, SCALE), r"`scale` is for score='normalized'; this regressor has "
                                   r"score='absolute'"),
    ("normalized", (Y, MEAN), r"`scale` is required for score='normalized'"),
    ("normalized", (Y, MEAN, np.array([1.0, 0.0, 2.0])), r"`scale` must be > 0 \(a predictive "
                                                         r"standard deviation\), got 0\.0 at "
                                                         r"index 1"),
    ("normalized", (Y, MEAN, -SCALE), r"`scale` must be > 0.*got -1\.0 at index 0"),
    ("normalized", (Y, MEAN, SCALE[:2]), r"`scale` has 2 rows but `mean` has 3"),
    ("normalized", (Y, MEAN, np.array([1.0, np.nan, 2.0])), r"`scale` must be finite, got nan"),
])
def test_bad_fit_input(score, arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.SplitConformalRegressor(score=score).fit(*arguments)


def test_bad_predict_input():
    absolute = conformal.SplitConformalRegressor(alpha=0.5).fit(Y, MEAN)
    with pytest.raises(ValueError, match=r"`mean` must be finite, got nan at index 0"):
        absolute.predict_interval([np.nan])
    with pytest.raises(ValueError, match=r"`scale` is for score='normalized'"):
        absolute.predict_interval(MEAN, SCALE)
    normalized = conformal.SplitConformalRegressor(alpha=0.5, score="normalized").fit(
        Y, MEAN, SCALE)
    with pytest.raises(ValueError, match=r"`scale` is required for score='normalized'"):
        normalized.predict_interval(MEAN)
    with pytest.raises(ValueError, match=r"`scale` has 2 rows but `mean` has 3"):
        normalized.predict_interval(MEAN, SCALE[:2])


@pytest.mark.parametrize("arguments, pattern", [
    ({"alpha": 0.0}, r"`alpha` must be a number in \(0, 1\), got 0\.0"),
    ({"alpha": "0.1"}, r"`alpha` must be a number in \(0, 1\), got '0\.1'"),
    ({"score": "squared"}, r"`score` must be one of \['absolute', 'normalized'\], got "
                           r"'squared'"),
])
def test_bad_constructor_arguments(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.SplitConformalRegressor(**arguments)


def test_bad_predictions():
    prediction, y = _prediction(3, 20, outputs=2)
    with pytest.raises(ValueError, match=r"`prediction` has 2 outputs per point \(mean shape "
                                         r"\(20, 2\)\); a conformal interval is for one output"):
        conformal.SplitConformalRegressor.from_prediction(prediction, y[:, 0])
    with pytest.raises(ValueError, match=r"`prediction` must be a "
                                         r"tfp_bnn.predict.RegressionPrediction, got ndarray"):
        conformal.SplitConformalRegressor.from_prediction(np.zeros(3), np.zeros(3))
    prediction, y = _prediction(3, 20)
    with pytest.raises(ValueError, match=r"`y` has 19 rows but `prediction` has 20"):
        conformal.SplitConformalRegressor.from_prediction(prediction, y[:19])
    noiseless = RegressionPrediction(np.zeros((1, 5)))   # one sample, no noise: sd 0
    with pytest.raises(ValueError, match=r"`prediction` has a predictive standard deviation "
                                         r"of 0 at row 0; score='normalized' divides by it"):
        conformal.SplitConformalRegressor.from_prediction(noiseless, np.zeros(5))
    fitted = conformal.SplitConformalRegressor.from_prediction(noiseless, np.arange(5.0),
                                                               alpha=0.5, score="absolute")
    assert fitted.quantile == 2.0   # |y|: 0 1 2 3 4, k = ceil(6 * 0.5) = 3

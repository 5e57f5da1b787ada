"""Tests of the regression calibration scores of tfp_bnn.metrics
(`tfp_bnn/metrics/_regression_calibration.py`): the PIT of a Gaussian-mixture predictive in
closed form, and the quantile calibration error on plain loops, on targets drawn from the
predictive itself (calibrated) and on an over-confident predictive.
"""

import math

import numpy as np
import pytest
from scipy import stats

from tfp_bnn import metrics
from tfp_bnn._substrate import tfp
from tfp_bnn.predict import DistributionPrediction
from tfp_bnn.predict import RegressionPrediction

pytestmark = pytest.mark.jax

LEVELS = [j / 20 for j in range(1, 20)]


def test_pit_of_one_gaussian_is_its_cdf():
    rng = np.random.default_rng(0)
    means = rng.normal(size=(1, 30, 2))
    variances = rng.uniform(0.1, 4.0, size=(1, 30, 2))
    y = rng.normal(size=(30, 2)) * 3
    pit = metrics.probability_integral_transform(RegressionPrediction(means, variances), y)
    assert pit.dtype == np.float64 and pit.shape == (30, 2)
    expected = stats.norm.cdf(y, loc=means[0], scale=np.sqrt(variances[0]))
    np.testing.assert_allclose(pit, expected, rtol=1e-12, atol=1e-15)


def test_pit_of_a_mixture_is_the_mean_of_its_components_cdfs():
    rng = np.random.default_rng(1)
    means = rng.normal(size=(5, 40))  # T = 5 samples, N = 40, no output axis
    variances = rng.uniform(0.1, 2.0, size=(5, 40))
    y = rng.normal(size=40)
    pit = metrics.probability_integral_transform(RegressionPrediction(means, variances), y)
    expected = np.mean([stats.norm.cdf(y, means[t], np.sqrt(variances[t])) for t in range(5)],
                       axis=0)
    np.testing.assert_allclose(pit, expected, rtol=1e-12, atol=1e-15)
    # Targets [N, 1] for predictions [N] are accepted as `coverage` accepts them.
    np.testing.assert_allclose(
        metrics.probability_integral_transform(RegressionPrediction(means, variances),
                                               y[:, None]), expected, rtol=1e-12)


def test_pit_of_a_zero_variance_sample_is_a_step_at_its_mean():
    prediction = RegressionPrediction(np.array([[0.0, 0.0, 0.0]]), np.zeros((1, 3)))
    pit = metrics.probability_integral_transform(prediction, [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(pit, [0.0, 1.0, 1.0])


def _brute_force_error(pit, levels, order):
    gaps = []
    for p in levels:
        below = sum(1 for u in pit if u <= p) / len(pit)
        gaps.append(abs(p - below) ** order)
    return sum(gaps) / len(gaps)


@pytest.mark.parametrize("order", [1, 2])
def test_quantile_calibration_error_equals_a_plain_loop(order):
    rng = np.random.default_rng(2)
    pit = rng.beta(0.7, 1.4, size=301)
    # Values exactly on levels count as below them (u <= p).
    pit[:19] = LEVELS
    expected = _brute_force_error(pit, LEVELS, order)
    value = metrics.quantile_calibration_error(pit, order=order)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, abs=1e-15)
    levels = [0.0, 0.3, 0.37, 1.0]
    assert metrics.quantile_calibration_error(pit, levels, order) == pytest.approx(
        _brute_force_error(pit, levels, order), abs=1e-15)
    # [N, D] values are pooled.
    assert metrics.quantile_calibration_error(pit[:300].reshape(100, 3), order=order) == \
        pytest.approx(_brute_force_error(pit[:300], LEVELS, order), abs=1e-15)


def _mixture(seed, n, num_samples=4):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(num_samples, n)) + rng.normal(size=n) * 2
    variances = rng.uniform(0.2, 1.5, size=(num_samples, n))
    return rng, means, variances


def test_targets_drawn_from_the_predictive_are_calibrated():
    n = 4000
    rng, means, variances = _mixture(3, n)
    component = rng.integers(0, means.shape[0], size=n)
    y = rng.normal(means[component, np.arange(n)], np.sqrt(variances[component, np.arange(n)]))
    pit = metrics.probability_integral_transform(RegressionPrediction(means, variances), y)
    levels = np.array(LEVELS)
    # The fraction below each level is a binomial proportion: 4 standard errors.
    bounds = 4 * np.sqrt(levels * (1 - levels) / n)
    below = np.array([np.mean(pit <= p) for p in levels])
    assert np.all(np.abs(below - levels) <= bounds)
    assert metrics.quantile_calibration_error(pit) <= np.mean(bounds)
    assert metrics.quantile_calibration_error(pit, order=2) <= np.mean(bounds ** 2)


def test_an_over_confident_predictive_has_a_large_error():
    n = 4000
    rng, means, variances = _mixture(4, n, num_samples=1)
    y = rng.normal(means[0], np.sqrt(variances[0]))
    # Standard deviations shrunk to 0.3 of the truth: the fraction below the
    # p-quantile is Phi(0.3 z_p), e.g. 0.31 at p = 0.05.
    pit = metrics.probability_integral_transform(RegressionPrediction(means, 0.09 * variances), y)
    levels = np.array(LEVELS)
    exact = np.mean(np.abs(levels - stats.norm.cdf(0.3 * stats.norm.ppf(levels))))
    bound = np.mean(4 * np.sqrt(levels * (1 - levels) / n))
    error = metrics.quantile_calibration_error(pit)
    assert error > 5 * bound  # about 6 times the noise level
    assert error == pytest.approx(exact, abs=bound)


def test_a_distribution_prediction_with_normal_outputs_gives_the_same_pit():
    means, variances = np.zeros((2, 3, 1)), np.ones((2, 3, 1))
    normal = tfp.distributions.Normal(np.zeros((6, 1), np.float32), 1.0)
    prediction = DistributionPrediction(means, variances, [(0, 2, 0, 3, normal)])
    pit = metrics.probability_integral_transform(prediction, [[0.0], [1.0], [-2.0]])
    np.testing.assert_allclose(pit[:, 0], stats.norm.cdf([0.0, 1.0, -2.0]), rtol=1e-12)


def test_bad_prediction_and_targets():
    prediction = RegressionPrediction(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"`prediction` must be a tfp_bnn.predict."
                                         r"RegressionPrediction.*got ndarray"):
        metrics.probability_integral_transform(np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError, match=r"`y` has shape \(4,\) but the predictions have "
                                         r"shape \(3,\)"):
        metrics.probability_integral_transform(prediction, np.zeros(4))
    with pytest.raises(ValueError, match=r"`y` contains NaN or infinite values"):
        metrics.probability_integral_transform(prediction, [0.0, math.nan, 1.0])
    with pytest.raises(ValueError, match=r"`y` must be an array of numbers"):
        metrics.probability_integral_transform(prediction, ["a", "b", "c"])
    laplace = tfp.distributions.Laplace(np.zeros((2, 1), np.float32), 1.0)
    non_normal = DistributionPrediction(np.zeros((2, 1)), np.ones((2, 1)),
                                        [(0, 2, 0, 1, laplace)])
    with pytest.raises(ValueError, match=r"output distributions are not Normal"):
        metrics.probability_integral_transform(non_normal, [0.0])


@pytest.mark.parametrize(
    "pit, levels, order, pattern",
    [
        ([0.1, np.nan], None, 1, r"`pit` must be finite, got nan at index 1"),
        ([0.1, 1.2], None, 1, r"`pit` must lie in \[0, 1\].*got values from 0\.1 to 1\.2"),
        ([-0.1, 0.5], None, 1, r"`pit` must lie in \[0, 1\]"),
        ([], None, 1, r"`pit` is empty"),
        (np.zeros((0, 2)), None, 1, r"`pit` is empty \(shape \(0, 2\)\)"),
        (["a"], None, 1, r"`pit` must be numeric"),
        ([[0.1], [0.2, 0.3]], None, 1, r"`pit` is ragged"),
        ([0.5], [[0.5]], 1, r"`levels` must be 1-D"),
        ([0.5], [0.5, 1.5], 1, r"`levels` must lie in \[0, 1\]"),
        ([0.5], [np.nan], 1, r"`levels` must be finite"),
        ([0.5], [], 1, r"`levels` is empty"),
        ([0.5], None, 3, r"`order` must be one of \[1, 2\], got 3"),
        ([0.5], None, "2", r"`order` must be one of \[1, 2\], got '2'"),
        ([0.5], None, None, r"`order` must be one of \[1, 2\], got None"),
    ],
)
def test_bad_quantile_calibration_error_arguments(pit, levels, order, pattern):
    with pytest.raises(ValueError, match=pattern):
        metrics.quantile_calibration_error(pit, levels, order)

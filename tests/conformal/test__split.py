"""The conformal quantile, its rank and the shared base (`tfp_bnn/conformal/_split.py`).

The quantile is checked against a plain sort and index with the rank from exact rational
arithmetic (tests/conformal/coverage_checks.py), and the coverage check of the method tests
is shown to reject a quantile one rank too low and an oracle quantile whose coverage has
the right mean but not the calibration set's spread.
"""

import json
import math
import warnings

import numpy as np
import pytest

from tests.conformal import coverage_checks
from tfp_bnn import conformal
from tfp_bnn.conformal import _split

pytestmark = pytest.mark.jax

ALPHAS = (0.01, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.33, 0.5, 0.7, 0.9)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_rank_is_the_exact_ceiling(alpha):
    for n in range(1, 400):
        assert _split.conformal_rank(n, alpha) == coverage_checks.rank(n, alpha), n


def test_rank_of_decimals_on_an_integer_boundary():
    # (n + 1) alpha is an integer for these; alpha's double lies just below or above it.
    assert _split.conformal_rank(9, 0.3) == 7      # ceil(10 * 0.7)
    assert _split.conformal_rank(99, 0.1) == 90    # ceil(100 * 0.9)
    assert _split.conformal_rank(19, 0.05) == 19   # ceil(20 * 0.95)
    assert _split.conformal_rank(2, 0.9) == 1      # ceil(3 * 0.1) = ceil(0.3)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_quantile_is_the_kth_smallest_score(alpha):
    rng = np.random.default_rng(int(alpha * 1000))
    for n in (1, 2, 5, 9, 10, 37, 100, 1000):
        scores = rng.exponential(size=n)
        k = coverage_checks.rank(n, alpha)
        expected = math.inf if k > n else np.sort(scores)[k - 1]
        assert conformal.conformal_quantile(scores, alpha) == expected, n


def test_quantile_with_ties_and_integers():
    scores = [3, 1, 2, 2, 2, 5, 4, 2, 1, 0]
    # n = 10, alpha = 0.2: k = ceil(11 * 0.8) = 9; sorted 0 1 1 2 2 2 2 3 4 5 -> 4.
    assert conformal.conformal_quantile(scores, 0.2) == 4.0
    # alpha = 0.5: k = ceil(5.5) = 6 -> 2 (ties do not move the order statistic).
    assert conformal.conformal_quantile(scores, 0.5) == 2.0


@pytest.mark.parametrize("alpha", ALPHAS)
def test_minimum_calibration_size_is_the_first_finite_quantile(alpha):
    n = conformal.minimum_calibration_size(alpha)
    assert coverage_checks.rank(n, alpha) <= n
    assert n == 1 or coverage_checks.rank(n - 1, alpha) > n - 1
    assert n == max(1, math.ceil(1 / alpha) - 1)
    assert math.isfinite(conformal.conformal_quantile(np.ones(n), alpha))
    if n > 1:
        assert conformal.conformal_quantile(np.ones(n - 1), alpha) == math.inf


def _per_seed_coverage(quantile_of):
    """Coverage of exponential scores on TEST_POINTS points per seed, Q from quantile_of."""
    rng = np.random.default_rng(7)
    shape = (coverage_checks.SEEDS, coverage_checks.CALIBRATION + coverage_checks.TEST_POINTS)
    scores = rng.exponential(size=shape)
    calibration = scores[:, :coverage_checks.CALIBRATION]
    test = scores[:, coverage_checks.CALIBRATION:]
    quantiles = np.array([quantile_of(row) for row in calibration])
    return coverage_checks.covered_fraction(test <= quantiles[:, None])


def test_the_quantile_has_the_exact_coverage_law():
    per_seed = _per_seed_coverage(
        lambda row: conformal.conformal_quantile(row, coverage_checks.ALPHA))
    coverage_checks.assert_coverage_law(per_seed)


def test_the_coverage_check_rejects_a_quantile_one_rank_low():
    k = coverage_checks.rank(coverage_checks.CALIBRATION, coverage_checks.ALPHA)
    per_seed = _per_seed_coverage(lambda row: np.sort(row)[k - 2])
    mean_error, _ = coverage_checks.coverage_errors(per_seed)
    assert mean_error < -coverage_checks.TOLERANCE_SE  # 90/101 instead of 91/101


def test_the_coverage_check_rejects_an_oracle_quantile():
    # The exponential's true k/(n+1) quantile: the right mean, but no calibration noise,
    # so the per-seed spread is the binomial one alone (about half the law's).
    level = coverage_checks.expected_coverage()
    per_seed = _per_seed_coverage(lambda row: -math.log1p(-level))
    mean_error, variance_error = coverage_checks.coverage_errors(per_seed)
    assert abs(mean_error) <= coverage_checks.TOLERANCE_SE
    assert variance_error < -coverage_checks.TOLERANCE_SE


class _Scores(_split.SplitConformal):
    """The base with the scores given directly, as a subclass's fit hands them over."""

    def fit(self, scores):
        self._calibrate(np.asarray(scores, dtype=np.float64))
        return self


def test_base_not_fitted():
    unfitted = _Scores(alpha=0.2)
    assert not unfitted.fitted
    with pytest.raises(ValueError, match=r"This _Scores is not fitted: call fit\(\) before "
                                         r"quantile\."):
        unfitted.quantile
    with pytest.raises(ValueError, match=r"not fitted: call fit\(\) before calibration_size"):
        unfitted.calibration_size
    assert "not fitted" in repr(unfitted)


def test_base_config_round_trip_is_strict_json():
    fitted = _Scores(alpha=0.2).fit([0.5, 0.1, 0.3, 0.2, 0.4])   # k = 5: Q = 0.5
    config = fitted.get_config()
    assert config == {"alpha": 0.2, "calibration_size": 5, "quantile": 0.5}
    restored = _Scores.from_config(json.loads(json.dumps(config, allow_nan=False)))
    assert (restored.quantile, restored.calibration_size) == (0.5, 5)
    assert _Scores.from_config(_Scores(alpha=0.3).get_config()).fitted is False


def test_infinite_quantile_warns_and_round_trips():
    with pytest.warns(UserWarning, match=r"n = 3 calibration rows and alpha = 0\.2.*infinite.*"
                                         r"at least 4 rows"):
        fitted = _Scores(alpha=0.2).fit([0.5, 0.1, 0.3])
    assert fitted.quantile == math.inf
    config = fitted.get_config()
    assert config["quantile"] is None and config["calibration_size"] == 3
    json.dumps(config, allow_nan=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # restoring a fit does not warn again
        assert _Scores.from_config(config).quantile == math.inf


def test_finite_quantile_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _Scores(alpha=0.2).fit([0.5, 0.1, 0.3, 0.2])   # n = 4 = minimum_calibration_size


@pytest.mark.parametrize("config, pattern", [
    ({"alpha": 0.2, "calibration_size": None, "quantile": 0.5},
     r"`quantile` \(0\.5\) needs its `calibration_size`"),
    ({"alpha": 0.2, "calibration_size": 3, "quantile": 0.5},
     r"`quantile` must be None \(infinite\) for calibration_size = 3 at alpha = 0\.2"),
    ({"alpha": 0.2, "calibration_size": 10, "quantile": None},
     r"`quantile` must be a finite number, got None"),
    ({"alpha": 0.2, "calibration_size": 0, "quantile": 0.5},
     r"`calibration_size` must be a positive int, got 0"),
    ({"alpha": 1.5, "calibration_size": None, "quantile": None},
     r"`alpha` must be a number in \(0, 1\), got 1\.5"),
])
def test_bad_configs(config, pattern):
    with pytest.raises(ValueError, match=pattern):
        _Scores.from_config(config)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.1, np.nan, math.inf, "0.1", None, True])
def test_bad_alpha(alpha):
    pattern = r"`alpha` must be a number in \(0, 1\), got"
    with pytest.raises(ValueError, match=pattern):
        conformal.conformal_quantile([1.0, 2.0], alpha)
    with pytest.raises(ValueError, match=pattern):
        conformal.minimum_calibration_size(alpha)
    with pytest.raises(ValueError, match=pattern):
        _Scores(alpha=alpha)


@pytest.mark.parametrize("scores, pattern", [
    ([], r"`scores` is empty"),
    ([[1.0, 2.0]], r"`scores` must be 1-D, got shape \(1, 2\)"),
    ([1.0, np.nan], r"`scores` must be finite, got nan at index 1"),
    ([1.0, np.inf], r"`scores` must be finite, got inf at index 1"),
    (["a", "b"], r"`scores` must be numeric"),
])
def test_bad_scores(scores, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.conformal_quantile(scores, 0.1)


def test_matching_rows_names_both_arrays():
    with pytest.raises(ValueError, match=r"`y` has 2 rows but `mean` has 3"):
        _split.matching_rows(mean=np.zeros(3), y=np.zeros(2))

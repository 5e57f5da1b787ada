"""The interval and set metrics of `tfp_bnn/conformal/metrics.py` on hand-computed cases,
infinite bounds, and their bad input.
"""

import math

import numpy as np
import pytest

from tfp_bnn import conformal

pytestmark = pytest.mark.jax

# y      lower   upper   inside   width
# 0.0    -1.0    1.0     yes      2
# 1.0     1.0    2.0     yes (closed at 1.0)   1
# 2.5     1.0    2.0     no       1
# 5.0    -inf    4.0     no       inf
Y = np.array([0.0, 1.0, 2.5, 5.0])
LOWER = np.array([-1.0, 1.0, 1.0, -np.inf])
UPPER = np.array([1.0, 2.0, 2.0, 4.0])

# label  set (K = 3)            covered  size
# 0      {0, 1}                 yes      2
# 2      {0}                    no       1
# 1      {1}                    yes      1
# 2      {}                     no       0
# 0      {0, 1, 2}              yes      3
LABELS = np.array([0, 2, 1, 2, 0])
SETS = np.array([[True, True, False], [True, False, False], [False, True, False],
                 [False, False, False], [True, True, True]])


def test_coverage_and_width_by_hand():
    assert conformal.coverage(Y, LOWER, UPPER) == 0.5
    assert conformal.mean_width(LOWER[:3], UPPER[:3]) == pytest.approx(4.0 / 3.0, rel=1e-15)
    assert conformal.mean_width(LOWER, UPPER) == math.inf
    assert conformal.coverage([3.0], [-np.inf], [np.inf]) == 1.0
    assert conformal.mean_width([2.0, 0.0], [1.0, 1.0]) == 0.5   # an empty interval is 0 wide
    assert isinstance(conformal.coverage(Y, LOWER, UPPER), float)


def test_set_metrics_by_hand():
    assert conformal.set_coverage(LABELS, SETS) == 0.6
    assert conformal.set_coverage(LABELS[:, None], SETS) == 0.6   # [N, 1] labels
    assert conformal.mean_set_size(SETS) == 7 / 5
    result = conformal.size_stratified_coverage(LABELS, SETS)
    np.testing.assert_array_equal(result.sizes, [0, 1, 2, 3])
    np.testing.assert_array_equal(result.counts, [1, 2, 1, 1])
    np.testing.assert_array_equal(result.coverage, [0.0, 0.5, 1.0, 1.0])
    assert result.sizes.dtype == np.int64 and result.counts.dtype == np.int64


def test_size_stratified_coverage_matches_a_loop():
    rng = np.random.default_rng(0)
    sets = rng.uniform(size=(500, 6)) < 0.4
    labels = rng.integers(0, 6, size=500)
    result = conformal.size_stratified_coverage(labels, sets)
    for size, coverage, count in zip(*result):
        rows = [i for i in range(500) if sets[i].sum() == size]
        assert count == len(rows)
        assert coverage == pytest.approx(np.mean([sets[i, labels[i]] for i in rows]),
                                         rel=1e-15)
    assert result.counts.sum() == 500


@pytest.mark.parametrize("arguments, pattern", [
    ((Y[:3], LOWER, UPPER), r"`y` has 3 rows but `lower` has 4"),
    ((Y, LOWER, UPPER[:3]), r"`upper` has 3 rows but `lower` has 4"),
    ((Y, np.where(LOWER == 1.0, np.nan, LOWER), UPPER),
     r"`lower` must not be NaN \(infinite bounds are allowed\), got nan at index 1"),
    ((Y, LOWER, UPPER[None]), r"`upper` must be 1-D, got shape \(1, 4\)"),
    ((np.where(Y == 5.0, np.inf, Y), LOWER, UPPER), r"`y` must be finite, got inf at index 3"),
    ((Y, LOWER.astype(str), UPPER), r"`lower` must be numeric"),
    (([], [], []), r"`lower` is empty"),
])
def test_bad_interval_input(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.coverage(*arguments)


def test_bad_width_input():
    with pytest.raises(ValueError, match=r"`upper` has 1 rows but `lower` has 2"):
        conformal.mean_width([0.0, 1.0], [2.0])
    with pytest.raises(ValueError, match=r"`upper` must not be NaN"):
        conformal.mean_width([0.0], [np.nan])


@pytest.mark.parametrize("labels, sets, pattern", [
    (LABELS[:4], SETS, r"`labels` has 4 rows but `sets` has 5"),
    (LABELS, SETS.astype(int), r"`sets` must be a boolean mask .*got dtype int"),
    (LABELS, SETS[:, :1], r"`sets` must be a boolean mask \[N, K\] with K >= 2 classes, got "
                          r"shape \(5, 1\)"),
    (LABELS, SETS[0], r"`sets` must be a boolean mask \[N, K\].*got shape \(3,\)"),
    (np.array([0, 2, 3, 2, 0]), SETS, r"`labels` must lie in \[0, 3\) for sets of 3 classes, "
                                      r"got 3 at index 2"),
    (np.array([0, -1, 1, 2, 0]), SETS, r"`labels` must lie in \[0, 3\).*got -1 at index 1"),
    ([0, 0.5, 1, 2, 0], SETS, r"`labels` must be integer class ids"),
    ([], np.zeros((0, 3), dtype=bool), r"`sets` is empty"),
])
@pytest.mark.parametrize("metric", ["set_coverage", "size_stratified_coverage"])
def test_bad_set_input(metric, labels, sets, pattern):
    with pytest.raises(ValueError, match=pattern):
        getattr(conformal, metric)(labels, sets)


def test_bad_mean_set_size_input():
    with pytest.raises(ValueError, match=r"`sets` must be a boolean mask"):
        conformal.mean_set_size(np.ones((2, 3)))


def test_one_output_columns_are_taken_as_vectors():
    # RegressionPrediction.interval gives [N, 1] for one output.
    lower, upper = np.array([[0.0], [1.0], [2.0]]), np.array([[1.0], [2.0], [3.0]])
    assert conformal.coverage(np.array([[0.5], [3.0], [2.5]]), lower, upper) == pytest.approx(2 / 3)
    assert conformal.mean_width(lower, upper) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="`lower` must be 1-D"):
        conformal.coverage(np.zeros(3), np.zeros((3, 2)), np.zeros((3, 2)))

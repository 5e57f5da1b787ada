"""How conformal intervals and sets did on test data: coverage, width, set size.

Each function validates its inputs, computes in float64 and returns a Python float (or a
`SizeStratifiedCoverage`). Intervals are closed, [lower, upper], and may be infinite
(a conformal quantile of inf); sets are boolean masks [N, K], as
`SplitConformalClassifier.predict_sets` returns them.

On m test points exchangeable with the n calibration rows, the coverage is a Binomial(m, c)
fraction whose c, given the calibration set, follows Beta(k, n + 1 - k) with
k = ceil((n + 1)(1 - alpha)): its mean is k / (n + 1) >= 1 - alpha, so a coverage a little
below 1 - alpha on one test set is expected, not a failure.
"""

import collections

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.conformal import _split
from tfp_bnn.metrics._scores import _check_labels


class SizeStratifiedCoverage(collections.namedtuple(
        "SizeStratifiedCoverage", ["sizes", "coverage", "counts"])):
    """The coverage of the sets of each size, from `size_stratified_coverage` (a named tuple).

    Args:
        sizes: int64 [S], the set sizes that occur, increasing.
        coverage: float64 [S], the fraction of those sets that hold their label.
        counts: int64 [S], the number of sets of each size.

    Example:
    >>> size_stratified_coverage([0, 1, 1], [[True, False], [True, False], [True, True]])
    SizeStratifiedCoverage(sizes=array([1, 2]), coverage=array([0.5, 1. ]), counts=array([2, 1]))
    """

    __slots__ = ()


def _bounds(name, values):
    """`values` as a 1-D float64 array without NaN (infinite bounds allowed), non-empty; a
    column [N, 1] (one output of `RegressionPrediction.interval`) is taken as [N]."""
    values = check.array(name, values)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {values.shape}.")
    if values.size == 0:
        raise ValueError(f"`{name}` is empty.")
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"`{name}` must be numeric, got dtype {values.dtype}.")
    values = values.astype(np.float64)
    bad = np.isnan(values)
    if bad.any():
        raise ValueError(f"`{name}` must not be NaN (infinite bounds are allowed), got nan "
                         f"at index {int(np.flatnonzero(bad)[0])}.")
    return values


def _interval(lower, upper):
    lower, upper = _bounds("lower", lower), _bounds("upper", upper)
    _split.matching_rows(lower=lower, upper=upper)
    return lower, upper


def _sets(sets):
    """`sets` as a boolean [N, K] array (K >= 2), or ValueError."""
    sets = check.array("sets", sets)
    if sets.ndim != 2 or sets.shape[1] < 2:
        raise ValueError(f"`sets` must be a boolean mask [N, K] with K >= 2 classes, got "
                         f"shape {sets.shape}.")
    if sets.shape[0] == 0:
        raise ValueError(f"`sets` is empty (shape {sets.shape}).")
    if sets.dtype != np.bool_:
        raise ValueError(f"`sets` must be a boolean mask (True: the class is in the set), "
                         f"got dtype {sets.dtype}.")
    return sets


def _labels_in(labels, sets):
    """(labels, sets) checked against each other: one label in [0, K) per set."""
    sets = _sets(sets)
    labels = _check_labels(labels)
    _split.matching_rows(sets=sets, labels=labels)
    bad = (labels < 0) | (labels >= sets.shape[1])
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise ValueError(f"`labels` must lie in [0, {sets.shape[1]}) for sets of "
                         f"{sets.shape[1]} classes, got {int(labels[index])} at index {index}.")
    return labels, sets


def coverage(y, lower, upper) -> float:
    """The fraction of targets inside their interval, lower <= y <= upper.

    Args:
        y: test targets [N] (or [N, 1]), finite.
        lower: the intervals' lower ends [N] (or [N, 1], as `RegressionPrediction.interval`
            gives them for one output; may be -inf).
        upper: their upper ends, shaped as `lower` (may be inf).

    Returns:
        A float in [0, 1].

    Example:
    >>> coverage([0.0, 1.0, 5.0], [-1.0, 1.0, -np.inf], [1.0, 2.0, 4.0])
    0.6666666666666666
    """
    lower, upper = _interval(lower, upper)
    y = check.array("y", y)
    y = check.vector("y", y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y)
    _split.matching_rows(lower=lower, y=y)
    return float(np.mean((lower <= y) & (y <= upper)))


def mean_width(lower, upper) -> float:
    """The mean interval width upper - lower (an empty interval, lower > upper, counts 0).

    Args:
        lower: the intervals' lower ends [N] (may be -inf).
        upper: their upper ends [N] (may be inf).

    Returns:
        A float >= 0; inf when an interval is infinite.

    Example:
    >>> mean_width([0.0, 1.0], [2.0, 5.0])
    3.0
    """
    lower, upper = _interval(lower, upper)
    return float(np.mean(np.maximum(upper - lower, 0.0)))


def set_coverage(labels, sets) -> float:
    """The fraction of prediction sets that hold their label.

    Args:
        labels: test class ids [N] (or [N, 1]) in [0, K).
        sets: prediction sets, a boolean mask [N, K].

    Returns:
        A float in [0, 1].

    Example:
    >>> set_coverage([0, 1], [[True, True], [True, False]])
    0.5
    """
    labels, sets = _labels_in(labels, sets)
    return float(np.mean(sets[np.arange(len(labels)), labels]))


def mean_set_size(sets) -> float:
    """The mean number of classes per prediction set.

    Args:
        sets: prediction sets, a boolean mask [N, K].

    Returns:
        A float in [0, K].

    Example:
    >>> mean_set_size([[True, True, False], [True, False, False]])
    1.5
    """
    return float(np.mean(_sets(sets).sum(axis=1)))


def size_stratified_coverage(labels, sets) -> SizeStratifiedCoverage:
    """The coverage among the sets of each size (Angelopoulos et al. 2021).

    Marginal coverage can hide sets of one size that miss often (small sets that
    under-cover, made up for by large ones); an adaptive method covers about 1 - alpha at
    every size.

    Args:
        labels: test class ids [N] (or [N, 1]) in [0, K).
        sets: prediction sets, a boolean mask [N, K].

    Returns:
        A `SizeStratifiedCoverage(sizes, coverage, counts)` over the sizes that occur.

    Example:
    >>> sets = np.array([[True, False, False], [True, False, False], [True, True, True]])
    >>> result = size_stratified_coverage([0, 1, 2], sets)   # size 1: one of two covered
    >>> result.sizes, result.coverage
    (array([1, 3]), array([0.5, 1. ]))
    """
    labels, sets = _labels_in(labels, sets)
    sizes = sets.sum(axis=1)
    covered = sets[np.arange(len(labels)), labels].astype(np.float64)
    present, index, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    hits = np.bincount(index.reshape(-1), weights=covered, minlength=len(present))
    return SizeStratifiedCoverage(present.astype(np.int64), hits / counts,
                                  counts.astype(np.int64))

"""Selective classification: the risk-coverage curve, its area (AURC) and the risk at a coverage.

A selective classifier answers only its most confident inputs and abstains on the rest. With
the inputs ranked by descending confidence, covering the first k of n gives coverage k / n and
the 0-1 risk (error rate) of those k. Exported as `tfp_bnn.metrics.<name>`.
"""

import collections

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.metrics._scores import _check_pair


class RiskCoverageCurve(collections.namedtuple("RiskCoverageCurve", ["coverage", "risk"])):
    """The risk-coverage curve from `risk_coverage_curve` (a named tuple).

    Point k - 1 covers the k most confident of the n examples.

    Args:
        coverage: float64 [n], the coverages k / n for k = 1..n, increasing.
        risk: float64 [n], the error rate of the k most confident examples.

    Example:
    >>> curve = risk_coverage_curve([0, 1], [[0.9, 0.1], [0.6, 0.4]])
    >>> curve.coverage, curve.risk
    (array([0.5, 1. ]), array([0. , 0.5]))
    """

    __slots__ = ()


def risk_coverage_curve(labels, probs, confidence=None) -> RiskCoverageCurve:
    """The 0-1 risk of the k most confident examples, for every coverage k / n.

    Examples are ranked by descending confidence (default: the maximum
    probability, max_k probs[i, k]); the prediction is the arg max of probs
    (the lowest class index on ties). Point k covers the first k of them:

        coverage_k = k / n,   risk_k = (1/k) sum_{j <= k} [yhat_(j) != y_(j)]

    (Geifman and El-Yaniv 2017; Geifman et al. 2019). Ties in confidence
    are broken by a stable sort: among equal confidences the example with
    the lower index is covered first. Only the points where a run of ties
    ends are free of this choice.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        confidence: None, or a finite score per example, shape [n], higher
            meaning more confident (e.g. minus the predictive entropy).

    Returns:
        A `RiskCoverageCurve(coverage, risk)`, each float64 of shape [n].

    Example:
    >>> labels = [0, 1, 1, 0]
    >>> probs = [[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.2, 0.8]]
    >>> curve = risk_coverage_curve(labels, probs)   # order: .9 ok, .8 wrong, .7 wrong, .6 ok
    >>> curve.risk
    array([0.        , 0.5       , 0.66666667, 0.5       ])
    """
    labels, probs = _check_pair(labels, probs)
    if confidence is None:
        confidence = probs.max(axis=1)
    else:
        confidence = check.vector("confidence", confidence)
        if confidence.size != labels.size:
            raise ValueError(f"`confidence` has {confidence.size} values but `labels` has "
                             f"{labels.size} examples.")
    errors = (probs.argmax(axis=1) != labels).astype(np.float64)
    order = np.argsort(-confidence, kind="stable")
    covered = np.arange(1, labels.size + 1, dtype=np.float64)
    return RiskCoverageCurve(covered / labels.size, np.cumsum(errors[order]) / covered)


def aurc(labels, probs, confidence=None) -> float:
    """Area under the risk-coverage curve (AURC): the mean risk over the n coverages.

        AURC = (1/n) sum_{k=1..n} risk_k

    with risk_k the error rate of the k most confident examples
    (`risk_coverage_curve`; Geifman et al. 2019, Ding et al. 2020). Lower is
    better. It mixes the ranking with the accuracy: a perfect ranking of a
    classifier with error rate r still scores about r + (1 - r) log(1 - r).
    Ties in confidence are broken by a stable sort (lower index first).

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        confidence: None (the maximum probability), or a finite score per
            example, shape [n], higher meaning more confident.

    Returns:
        The AURC, a float in [0, 1].

    Example:
    >>> labels = [0, 1, 1, 0]
    >>> probs = [[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.2, 0.8]]
    >>> round(aurc(labels, probs), 4)   # (0 + 1/2 + 2/3 + 1/2) / 4
    0.4167
    """
    return float(np.mean(risk_coverage_curve(labels, probs, confidence).risk))


def risk_at_coverage(labels, probs, coverage: float, confidence=None) -> float:
    """The error rate of the most confident examples that make up `coverage` of the data.

    Covers the k most confident examples, with k the smallest count whose
    coverage k / n is at least `coverage` (k = ceil(coverage * n), computed
    without rounding error), and returns their 0-1 risk, a point of
    `risk_coverage_curve`. Ties in confidence are broken by a stable sort
    (lower index first).

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        coverage: the fraction of examples to cover, a number in (0, 1].
        confidence: None (the maximum probability), or a finite score per
            example, shape [n], higher meaning more confident.

    Returns:
        The selective risk, a float in [0, 1].

    Example:
    >>> labels = [0, 1, 1, 0]
    >>> probs = [[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.2, 0.8]]
    >>> risk_at_coverage(labels, probs, coverage=0.5)   # the .9 and .8 examples: 1 error in 2
    0.5
    """
    coverage = check.number("coverage", coverage, 0, 1, low_open=True)
    curve = risk_coverage_curve(labels, probs, confidence)
    # k / n is correctly rounded, as the literal coverage is: 7 / 10 == 0.7 picks k = 7.
    return float(curve.risk[int(np.searchsorted(curve.coverage, coverage, side="left"))])

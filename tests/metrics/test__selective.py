"""Tests of the selective-classification scores of tfp_bnn.metrics
(`tfp_bnn/metrics/_selective.py`): the risk-coverage curve, AURC and the risk at a coverage,
against a plain loop over the ranked examples, with ties broken by the stable sort.
"""

import numpy as np
import pytest

from tfp_bnn import metrics

pytestmark = pytest.mark.jax


def _random_case(seed, n=97, num_classes=4, quantize=True):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(num_classes, 0.7), size=n)
    if quantize:  # tenths: many tied confidences and tied arg maxes
        probs = np.array([rng.multinomial(10, row) for row in probs]) / 10
    labels = rng.integers(0, num_classes, size=n)
    return labels, probs


def _brute_force_risks(labels, probs, confidence):
    """risk_k for k = 1..n, written as plainly as possible."""
    n = len(labels)
    # Python's sort is stable: among equal confidences the lower index comes first.
    ranked = sorted(range(n), key=lambda i: -confidence[i])
    risks = []
    for k in range(1, n + 1):
        errors = 0
        for i in ranked[:k]:
            row = list(probs[i])
            predicted = row.index(max(row))  # the first maximum
            errors += predicted != labels[i]
        risks.append(errors / k)
    return risks


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_curve_and_aurc_equal_a_plain_loop(seed, quantize):
    labels, probs = _random_case(seed, quantize=quantize)
    expected = _brute_force_risks(labels, probs, probs.max(axis=1))
    curve = metrics.risk_coverage_curve(labels, probs)
    assert isinstance(curve, metrics.RiskCoverageCurve)
    assert curve.coverage.dtype == np.float64 and curve.risk.dtype == np.float64
    np.testing.assert_allclose(curve.coverage, np.arange(1, 98) / 97, rtol=0, atol=1e-15)
    np.testing.assert_allclose(curve.risk, expected, rtol=0, atol=1e-12)
    value = metrics.aurc(labels, probs)
    assert isinstance(value, float)
    assert value == pytest.approx(sum(expected) / len(expected), abs=1e-12)


def test_a_given_confidence_ranks_the_examples():
    labels, probs = _random_case(5, quantize=False)
    neg_entropy = np.sum(probs * np.log(probs), axis=1)
    expected = _brute_force_risks(labels, probs, neg_entropy)
    curve = metrics.risk_coverage_curve(labels, probs, confidence=neg_entropy)
    np.testing.assert_allclose(curve.risk, expected, rtol=0, atol=1e-12)
    assert metrics.aurc(labels, probs, neg_entropy) == pytest.approx(np.mean(expected))
    # The ranking matters: the default confidence gives another area here.
    assert abs(metrics.aurc(labels, probs) - np.mean(expected)) > 1e-4


def test_ties_in_confidence_cover_the_lower_index_first():
    # Equal confidences: example 0 is wrong, example 1 right.
    labels = [1, 0, 0]
    probs = [[0.6, 0.4], [0.6, 0.4], [0.9, 0.1]]
    np.testing.assert_allclose(metrics.risk_coverage_curve(labels, probs).risk,
                               [0.0, 0.5, 1 / 3])
    # Swapped order: the right one comes first.
    labels = [0, 1, 0]
    np.testing.assert_allclose(metrics.risk_coverage_curve(labels, probs).risk,
                               [0.0, 0.0, 1 / 3])


def test_aurc_of_a_perfect_ranking_and_of_a_reversed_one():
    # 10 examples, 3 wrong: a perfect ranking covers the 7 right ones first.
    labels = np.array([0] * 7 + [1] * 3)
    confidence = np.linspace(1.0, 0.1, 10)
    probs = np.tile([[0.8, 0.2]], (10, 1))
    best = sum((k - 7) / k for k in range(8, 11)) / 10
    assert metrics.aurc(labels, probs, confidence) == pytest.approx(best, abs=1e-15)
    worst = (3 * 1.0 + sum(3 / k for k in range(4, 11))) / 10
    assert metrics.aurc(labels, probs, confidence[::-1].copy()) == pytest.approx(worst)


def test_risk_at_coverage_is_the_curve_at_the_smallest_sufficient_count():
    # Confidence falls with the index; the prediction is always class 0.
    confidence = np.linspace(0.95, 0.55, 10)
    probs = np.stack([confidence, 1 - confidence], axis=1)
    labels = np.array([0, 1, 0, 0, 0, 0, 0, 0, 0, 0])  # 1 = an error
    risks = _brute_force_risks(labels, probs, confidence)
    assert len(set(risks)) == 10  # every count k gives another risk
    # 0.7 * 10 == 7.000000000000001 in floats: a naive ceil would cover 8.
    assert metrics.risk_at_coverage(labels, probs, 0.7) == risks[6]
    for coverage, k in [(0.05, 1), (0.1, 1), (0.11, 2), (0.5, 5), (0.69, 7), (0.71, 8),
                        (1.0, 10), (1, 10)]:
        value = metrics.risk_at_coverage(labels, probs, coverage)
        assert isinstance(value, float)
        assert value == pytest.approx(risks[k - 1], abs=1e-15), coverage


LABELS = np.array([0, 1, 2, 1])
PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]])
SCORERS = {
    "aurc": metrics.aurc,
    "risk_coverage_curve": metrics.risk_coverage_curve,
    "risk_at_coverage": lambda labels, probs, confidence=None: metrics.risk_at_coverage(
        labels, probs, 0.5, confidence),
}


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize(
    "labels, probs, pattern",
    [
        (LABELS[:3], PROBS, r"`labels` has 3 examples but `probs` has 4"),
        (LABELS, PROBS[:, 0], r"`probs` must have shape \[n, K\]"),
        (LABELS, np.where(PROBS == 0.8, np.nan, PROBS), r"`probs` must be finite.*row 1"),
        (LABELS, PROBS * 0.5, r"`probs` rows must sum to 1"),
        ([0, 1, 3, 1], PROBS, r"`labels` must lie in \[0, 3\).*got 3 at index 2"),
        ([0, 1.5, 2, 1], PROBS, r"`labels` must be integer class ids"),
        ([], np.zeros((0, 3)), r"`labels` is empty"),
    ],
)
def test_bad_labels_and_probs(scorer, labels, probs, pattern):
    with pytest.raises(ValueError, match=pattern):
        SCORERS[scorer](labels, probs)


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize(
    "confidence, pattern",
    [
        ([0.1, 0.2, 0.3], r"`confidence` has 3 values but `labels` has 4 examples"),
        ([[0.1, 0.2, 0.3, 0.4]], r"`confidence` must be 1-D, got shape \(1, 4\)"),
        ([0.1, np.nan, 0.3, 0.4], r"`confidence` must be finite, got nan at index 1"),
        (["a", "b", "c", "d"], r"`confidence` must be numeric"),
    ],
)
def test_bad_confidence(scorer, confidence, pattern):
    with pytest.raises(ValueError, match=pattern):
        SCORERS[scorer](LABELS, PROBS, confidence=confidence)


@pytest.mark.parametrize("coverage", [0, 0.0, -0.5, 1.01, np.nan, "0.5", None, True])
def test_bad_coverage(coverage):
    with pytest.raises(ValueError, match=r"`coverage` must be a number in \(0, 1\], got"):
        metrics.risk_at_coverage(LABELS, PROBS, coverage)

"""The bad-input matrix of the NumPy scores of tfp_bnn.metrics (`_scores.py`).

Each scoring function meets every kind of mistake, so none of them can skip a check.
"""

import numpy as np
import pytest

from tfp_bnn import metrics

pytestmark = pytest.mark.jax

LABELS = np.array([0, 1, 2, 1])
PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]])

SCORERS = {
    "accuracy": metrics.accuracy,
    "brier_score": metrics.brier_score,
    "expected_calibration_error": metrics.expected_calibration_error,
    "negative_log_likelihood": metrics.negative_log_likelihood,
    "reliability_curve": metrics.reliability_curve,
}


def _set(array, index, value):
    array = np.array(array, dtype=np.float64)
    array[index] = value
    return array


BAD_PAIRS = [
    (LABELS[:3], PROBS, r"`labels` has 3 examples but `probs` has 4"),
    (LABELS, PROBS[:2], r"`labels` has 4 examples but `probs` has 2"),
    (LABELS, PROBS[None], r"`probs` must have shape \[n, K\].*got shape \(1, 4, 3\)"),
    (LABELS, PROBS[:, 0], r"`probs` must have shape \[n, K\].*got shape \(4,\)"),
    (LABELS, _set(PROBS, (2, 1), np.nan), r"`probs` must be finite, got .*nan.* in row 2"),
    (LABELS, _set(PROBS, (1, 0), np.inf), r"`probs` must be finite, got .*inf.* in row 1"),
    (LABELS, PROBS.astype(str), r"`probs` must be numeric, got dtype <U"),
    (LABELS, [[0.5, 0.5, 0.0], [1.0, 0.0], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]],
     r"`probs` is ragged"),
    (LABELS, PROBS * 3, r"`probs` must lie in \[0, 1\]"),
    (LABELS, PROBS * 0.5, r"`probs` rows must sum to 1 \(tolerance 1\.0e-03\); row 0 sums "
                          r"to 0\.4999"),
    ([0, 1, 3, 1], PROBS, r"`labels` must lie in \[0, 3\).*got 3 at index 2"),
    ([0, -2, 2, 1], PROBS, r"`labels` must lie in \[0, 3\).*got -2 at index 1"),
    ([0, 1.5, 2, 1], PROBS, r"`labels` must be integer class ids, got the value 1\.5 at "
                            r"index 1"),
    (np.array(["a", "b", "c", "d"]), PROBS, r"`labels` must be integer class ids.*dtype"),
    ([0, 0], np.ones((2, 1)), r"K >= 2.*\(2, 1\)"),
    ([0, 1, np.nan, 1], PROBS, r"`labels` must be integer class ids, got the value nan at "
                               r"index 2"),
    ([[0, 1], [2, 1]], PROBS, r"`labels` must have shape \[n\] or \[n, 1\].*\(2, 2\)"),
    ([[0], [1, 2], [1], [0]], PROBS, r"`labels` is ragged"),
    (None, PROBS, r"`labels` must have shape \[n\] or \[n, 1\].*got shape \(\)"),
    ([], np.zeros((0, 3)), r"`labels` is empty"),
    ([0], np.zeros((0, 3)), r"`probs` is empty"),
]


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize("labels, probs, pattern", BAD_PAIRS,
                         ids=[f"case{i}" for i in range(len(BAD_PAIRS))])
def test_bad_labels_and_probs(scorer, labels, probs, pattern):
    with pytest.raises(ValueError, match=pattern):
        SCORERS[scorer](labels, probs)


@pytest.mark.parametrize("scorer", ["expected_calibration_error", "reliability_curve"])
@pytest.mark.parametrize("num_bins", [0, -1, 1.5, "10", None, True])
def test_bad_num_bins(scorer, num_bins):
    with pytest.raises(ValueError, match=r"`num_bins` must be a positive int, got"):
        SCORERS[scorer](LABELS, PROBS, num_bins)


@pytest.mark.parametrize(
    "scores_in, scores_out, pattern",
    [
        ([0.1, 0.2], [[0.3]], r"`scores_out` must be 1-D, got shape \(1, 1\)"),
        ([0.1, np.nan], [0.3], r"`scores_in` must be finite, got nan at index 1"),
        ([0.1], [0.3, -np.inf], r"`scores_out` must be finite, got -inf at index 1"),
        (["a", "b"], [0.3], r"`scores_in` must be numeric, got dtype <U1"),
        ([[0.1], [0.2, 0.3]], [0.3], r"`scores_in` is ragged"),
        (np.zeros(0), [0.3], r"`scores_in` is empty"),
        ([0.1], [], r"`scores_out` is empty"),
    ],
)
def test_bad_auroc_scores(scores_in, scores_out, pattern):
    with pytest.raises(ValueError, match=pattern):
        metrics.auroc(scores_in, scores_out)

"""Tests of the OOD detection scores of tfp_bnn.metrics (`tfp_bnn/metrics/_ood.py`): AUPR and
FPR at 95% TPR against scikit-learn, hand-computed cases, and the input check they share with
`auroc`.
"""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score
from sklearn.metrics import roc_curve

from tfp_bnn import metrics

pytestmark = pytest.mark.jax


def _scores(seed, ties):
    rng = np.random.default_rng(seed)
    scores_in = rng.normal(0.0, 1.0, size=rng.integers(50, 300))
    scores_out = rng.normal(1.0, 1.5, size=rng.integers(20, 200))
    if ties:  # few distinct values: most thresholds hold both kinds of input
        scores_in, scores_out = np.round(scores_in), np.round(scores_out)
    return scores_in, scores_out


def _sklearn_inputs(scores_in, scores_out):
    y_true = np.concatenate([np.zeros(len(scores_in)), np.ones(len(scores_out))])
    return y_true, np.concatenate([scores_in, scores_out])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_aupr_equals_scikit_learn_average_precision(seed, ties):
    scores_in, scores_out = _scores(seed, ties)
    expected = average_precision_score(*_sklearn_inputs(scores_in, scores_out))
    value = metrics.aupr(scores_in, scores_out)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("tpr", [0.95, 0.5, 0.8, 1.0, 1e-9])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_fpr_at_tpr_equals_the_first_roc_point_reaching_it(seed, ties, tpr):
    scores_in, scores_out = _scores(seed, ties)
    # Every threshold kept: the point reaching the TPR may sit inside a straight segment.
    fpr, tpr_curve, _ = roc_curve(*_sklearn_inputs(scores_in, scores_out),
                                  drop_intermediate=False)
    expected = fpr[np.searchsorted(tpr_curve, tpr, side="left")]
    value = metrics.fpr_at_95_tpr(scores_in, scores_out, tpr=tpr)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, abs=1e-12)
    if tpr == 0.95:
        assert metrics.fpr_at_95_tpr(scores_in, scores_out) == value


def test_aupr_on_hand_computed_cases():
    # Thresholds .8 (out), .4 (in), .35 (out), .1 (in):
    # R: 1/2, 1/2, 1, 1; P: 1, 1/2, 2/3, 1/2 -> 1/2 * 1 + 1/2 * 2/3 = 5/6.
    assert metrics.aupr([0.1, 0.4], [0.35, 0.8]) == pytest.approx(5 / 6, abs=1e-15)
    assert metrics.aupr([0.0, 1.0], [2.0, 3.0, 4.0]) == 1.0
    # All tied: one threshold, recall 1 at precision m / (n + m).
    assert metrics.aupr([1.0, 1.0, 1.0], [1.0]) == 0.25
    # Reversed: the OOD inputs come last; recall is gained at precision 1/3 and 2/4.
    assert metrics.aupr([3.0, 2.0], [1.0, 0.0]) == pytest.approx((1 / 3 + 2 / 4) / 2)


def test_fpr_at_tpr_on_hand_computed_cases():
    scores_in = [0.1, 0.2, 0.3, 0.6]
    scores_out = [0.5, 0.7, 0.8, 0.9]
    assert metrics.fpr_at_95_tpr(scores_in, scores_out) == 0.25
    assert metrics.fpr_at_95_tpr(scores_in, scores_out, tpr=0.75) == 0.0
    assert metrics.fpr_at_95_tpr([0.0, 1.0], [2.0, 3.0]) == 0.0
    assert metrics.fpr_at_95_tpr([2.0, 3.0], [0.0, 1.0]) == 1.0
    # A tie between an in- and an OOD score is one threshold: both are flagged.
    assert metrics.fpr_at_95_tpr([0.0, 0.5], [0.5, 1.0]) == 0.5


def test_a_tpr_of_exactly_95_percent_counts_as_reached():
    # 20 OOD scores: 19 of them (exactly 95%) lie above every in-distribution score.
    scores_out = np.concatenate([np.arange(10.0, 29.0), [-5.0]])
    scores_in = np.arange(0.0, 10.0)
    assert metrics.fpr_at_95_tpr(scores_in, scores_out) == 0.0
    # One more percent needs the last OOD score, below every in-distribution score.
    assert metrics.fpr_at_95_tpr(scores_in, scores_out, tpr=0.96) == 1.0


SCORERS = {"auroc": metrics.auroc, "aupr": metrics.aupr, "fpr_at_95_tpr": metrics.fpr_at_95_tpr}


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize(
    "scores_in, scores_out, pattern",
    [
        ([0.1, 0.2], [[0.3]], r"`scores_out` must be 1-D, got shape \(1, 1\)"),
        ([[0.1, 0.2]], [0.3], r"`scores_in` must be 1-D, got shape \(1, 2\)"),
        ([0.1, np.nan], [0.3], r"`scores_in` must be finite, got nan at index 1"),
        ([0.1], [0.3, -np.inf], r"`scores_out` must be finite, got -inf at index 1"),
        (["a", "b"], [0.3], r"`scores_in` must be numeric, got dtype <U1"),
        ([[0.1], [0.2, 0.3]], [0.3], r"`scores_in` is ragged"),
        (np.zeros(0), [0.3], r"`scores_in` is empty"),
        ([0.1], [], r"`scores_out` is empty"),
        (None, [0.3], r"`scores_in` must be 1-D, got shape \(\)"),
    ],
)
def test_the_three_ood_scores_share_one_input_check(scorer, scores_in, scores_out, pattern):
    with pytest.raises(ValueError, match=pattern):
        SCORERS[scorer](scores_in, scores_out)


@pytest.mark.parametrize("tpr", [0, 0.0, -0.1, 1.5, np.nan, np.inf, "0.95", None, True])
def test_bad_tpr(tpr):
    with pytest.raises(ValueError, match=r"`tpr` must be a number in \(0, 1\], got"):
        metrics.fpr_at_95_tpr([0.1, 0.2], [0.3], tpr=tpr)

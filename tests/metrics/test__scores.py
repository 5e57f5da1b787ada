"""Tests of the NumPy scores of tfp_bnn.metrics (`tfp_bnn/metrics/_scores.py`): ECE,
reliability curve, accuracy, NLL, Brier score and AUROC on hand-computed cases.

Their bad-input matrix is in test__scores_bad_input.py.
"""

import math

import keras
import numpy as np
import pytest

from tfp_bnn import metrics

pytestmark = pytest.mark.jax
# Five examples, K = 3, num_bins = 4: edges 0, .25, .5, .75, 1 (all exact in binary).
#   probs               label  conf  correct  bin (right-closed)
#   [1.0, 0.0, 0.0]     0      1.0   yes      3  (conf == 1.0 goes to the last bin)
#   [0.2, 0.8, 0.0]     0      0.8   no       3
#   [0.6, 0.2, 0.2]     0      0.6   yes      2
#   [0.3, 0.4, 0.3]     1      0.4   yes      1
#   [0.5, 0.25, 0.25]   2      0.5   no       1  (0.5 is an edge: in (.25, .5])
# Bin 0 = (0, .25] is empty (a confidence is at least 1/K = 1/3).
#   bin 1: n 2, conf (0.4 + 0.5)/2 = 0.45, acc 1/2
#   bin 2: n 1, conf 0.6,                 acc 1
#   bin 3: n 2, conf (1.0 + 0.8)/2 = 0.9, acc 1/2
# ECE = 2/5 |.5 - .45| + 1/5 |1 - .6| + 2/5 |.5 - .9| = .02 + .08 + .16 = 0.26
# accuracy = 3/5
# NLL = (-log 1 - log .2 - log .6 - log .4 - log .25) / 5 = log(5 * 5/3 * 5/2 * 4) / 5
#     = log(250/3) / 5
# Brier = (0 + (.64 + .64) + (.16 + .04 + .04) + (.09 + .36 + .09)
#          + (.25 + .0625 + .5625)) / 5 = (0 + 1.28 + .24 + .54 + .875) / 5 = 0.587
HAND_PROBS = np.array(
    [
        [1.0, 0.0, 0.0],
        [0.2, 0.8, 0.0],
        [0.6, 0.2, 0.2],
        [0.3, 0.4, 0.3],
        [0.5, 0.25, 0.25],
    ]
)
HAND_LABELS = np.array([0, 0, 0, 1, 2])


def test_reliability_curve_on_a_hand_computed_case():
    curve = metrics.reliability_curve(HAND_LABELS, HAND_PROBS, num_bins=4)
    np.testing.assert_array_equal(curve.edges, [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(curve.counts, [0, 2, 1, 2])
    assert curve.counts.dtype == np.int64
    np.testing.assert_allclose(curve.confidence, [np.nan, 0.45, 0.6, 0.9], rtol=1e-12)
    np.testing.assert_allclose(curve.accuracy, [np.nan, 0.5, 1.0, 0.5], rtol=1e-12)


def test_scalar_scores_on_a_hand_computed_case():
    ece = metrics.expected_calibration_error(HAND_LABELS, HAND_PROBS, num_bins=4)
    assert isinstance(ece, float)
    assert ece == pytest.approx(0.26, abs=1e-12)
    assert metrics.accuracy(HAND_LABELS, HAND_PROBS) == pytest.approx(0.6, abs=1e-12)
    nll = metrics.negative_log_likelihood(HAND_LABELS, HAND_PROBS)
    assert nll == pytest.approx(math.log(250 / 3) / 5, rel=1e-12)
    assert metrics.brier_score(HAND_LABELS, HAND_PROBS) == pytest.approx(0.587, abs=1e-12)
    # Labels as [n, 1] and as whole-valued floats give the same numbers.
    assert metrics.expected_calibration_error(
        HAND_LABELS[:, None].astype(np.float32), HAND_PROBS, num_bins=4
    ) == pytest.approx(0.26, abs=1e-12)


def test_one_bin_ece_is_the_gap_between_mean_confidence_and_accuracy():
    # One bin: ECE = |acc - mean conf| = |3/5 - (1 + .8 + .6 + .4 + .5)/5| = |.6 - .66|.
    ece = metrics.expected_calibration_error(HAND_LABELS, HAND_PROBS, num_bins=1)
    assert ece == pytest.approx(0.06, abs=1e-12)


def test_nll_of_a_zero_probability_is_clipped_at_the_float64_normal_minimum():
    nll = metrics.negative_log_likelihood([1, 0], [[1.0, 0.0], [1.0, 0.0]])
    # (-log(tiny) + -log(1)) / 2, tiny = 2.2250738585072014e-308.
    assert nll == pytest.approx(-math.log(np.finfo(np.float64).tiny) / 2, rel=1e-12)
    assert nll == pytest.approx(708.3964185322641 / 2, rel=1e-12)


def test_auroc_on_hand_computed_cases():
    assert metrics.auroc([0.0, 1.0, 2.0], [3.0, 4.0]) == 1.0
    assert metrics.auroc([3.0, 4.0], [0.0, 1.0, 2.0]) == 0.0
    # Pairs (out, in): .2 > .1, .2 = .2, .2 = .2, and .3 beats all three:
    # (1 + .5 + .5 + 3) / 6 = 5/6.
    assert metrics.auroc([0.1, 0.2, 0.2], [0.2, 0.3]) == pytest.approx(5 / 6, abs=1e-15)
    assert metrics.auroc([1.0, 1.0], [1.0, 1.0, 1.0]) == 0.5
    assert metrics.auroc(np.array([1, 2]), np.array([2, 3])) == pytest.approx(7 / 8)


def test_auroc_equals_the_pairwise_count_on_random_data_with_ties():
    rng = np.random.default_rng(3)
    scores_in = rng.integers(0, 12, size=301).astype(np.float64)
    scores_out = rng.integers(3, 15, size=199).astype(np.float64)
    greater = (scores_out[:, None] > scores_in[None, :]).sum()
    ties = (scores_out[:, None] == scores_in[None, :]).sum()
    assert ties > 0
    expected = (greater + 0.5 * ties) / (scores_in.size * scores_out.size)
    assert metrics.auroc(scores_in, scores_out) == pytest.approx(expected, abs=1e-12)


def test_row_sum_tolerance_accepts_float32_softmax_over_many_classes():
    logits = np.random.default_rng(0).normal(scale=5.0, size=(64, 1000)).astype(np.float32)
    probs = keras.ops.convert_to_numpy(keras.ops.softmax(logits))
    labels = np.arange(64) % 1000
    assert np.isfinite(metrics.negative_log_likelihood(labels, probs))

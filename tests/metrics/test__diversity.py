"""Tests of `disagreement` (`tfp_bnn/metrics/_diversity.py`): against a plain loop over the
pairs of members and the points, on hand cases, and on bad input.
"""

import itertools

import numpy as np
import pytest

from tfp_bnn import metrics

pytestmark = pytest.mark.jax


def _first_max(row):
    row = list(row)
    return row.index(max(row))


def _brute_force(member_probs):
    num_members, num_points, _ = np.shape(member_probs)
    differ, pairs = 0, 0
    for m1, m2 in itertools.combinations(range(num_members), 2):
        for i in range(num_points):
            differ += _first_max(member_probs[m1][i]) != _first_max(member_probs[m2][i])
            pairs += 1
    return differ / pairs


@pytest.mark.parametrize("num_members, num_classes, quantize",
                         [(2, 3, False), (5, 3, True), (7, 10, False), (4, 2, True)])
def test_disagreement_equals_a_plain_loop_over_pairs(num_members, num_classes, quantize):
    rng = np.random.default_rng(num_members * num_classes)
    member_probs = rng.dirichlet(np.full(num_classes, 0.6), size=(num_members, 60))
    if quantize:  # quarters: tied maxima, broken to the lowest class index
        member_probs = np.array([[rng.multinomial(4, row) for row in member]
                                 for member in member_probs]) / 4
    expected = _brute_force(member_probs)
    assert 0.05 < expected < 0.95
    value = metrics.disagreement(member_probs)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, abs=1e-12)
    # Lists and float32 arrays give the same number.
    assert metrics.disagreement(member_probs.astype(np.float32).tolist()) == \
        pytest.approx(expected, abs=1e-12)


def test_disagreement_on_hand_computed_cases():
    agree = np.tile([[[0.9, 0.1], [0.3, 0.7]]], (3, 1, 1))
    assert metrics.disagreement(agree) == 0.0
    # Two members predicting differently everywhere.
    assert metrics.disagreement([[[0.9, 0.1]], [[0.2, 0.8]]]) == 1.0
    # Three members, three classes, all different: every pair disagrees.
    assert metrics.disagreement(np.eye(3)[:, None, :]) == 1.0
    # Votes 0, 0, 1 at one point: 2 of 3 pairs disagree. A tie [.5, .5] votes 0.
    assert metrics.disagreement([[[0.5, 0.5]], [[0.9, 0.1]], [[0.1, 0.9]]]) == \
        pytest.approx(2 / 3, abs=1e-15)


PROBS = np.array([[0.7, 0.3], [0.4, 0.6]])


@pytest.mark.parametrize(
    "member_probs, pattern",
    [
        (PROBS[None], r"`member_probs` must have shape \[M, N, K\] with M >= 2 members, got "
                      r"shape \(1, 2, 2\)"),
        (PROBS, r"`member_probs` must have shape \[M, N, K\].*\(2, 2\)"),
        (np.stack([PROBS, PROBS])[None], r"`member_probs` must have shape.*\(1, 2, 2, 2\)"),
        (np.stack([PROBS, np.where(PROBS == 0.6, np.nan, PROBS)]),
         r"`member_probs\[1\]` must be finite, got .*nan.* in row 1"),
        (np.stack([PROBS, PROBS * 0.5]), r"`member_probs\[1\]` rows must sum to 1"),
        (np.stack([PROBS * 2, PROBS]), r"`member_probs\[0\]` must lie in \[0, 1\]"),
        (np.ones((2, 3, 1)), r"`member_probs\[0\]` must have shape \[n, K\] with K >= 2"),
        (np.zeros((2, 0, 3)), r"`member_probs\[0\]` is empty"),
        (np.full((2, 2, 2), "a"), r"`member_probs\[0\]` must be numeric"),
        ([[[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]], r"`member_probs` is ragged"),
    ],
)
def test_bad_member_probs(member_probs, pattern):
    with pytest.raises(ValueError, match=pattern):
        metrics.disagreement(member_probs)

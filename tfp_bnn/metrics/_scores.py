"""The NumPy scores of predictive class probabilities: calibration, NLL, Brier, OOD AUROC.

Each function validates its inputs, computes in float64 and returns a Python float (or a
`ReliabilityCurve`). Exported as `tfp_bnn.metrics.<name>`.
"""

import collections
import math

import numpy as np

from tfp_bnn import _validation as check


class ReliabilityCurve(collections.namedtuple(
        "ReliabilityCurve", ["edges", "confidence", "accuracy", "counts"])):
    """Per-bin calibration statistics from `reliability_curve` (a named tuple).

    Bin b holds the examples whose confidence lies in (edges[b], edges[b+1]]
    (bin 0 also holds a confidence of exactly 0).

    Args:
        edges: float64 [num_bins + 1], the bin edges on [0, 1].
        confidence: float64 [num_bins], the mean confidence per bin, NaN
            for an empty bin.
        accuracy: float64 [num_bins], the accuracy per bin, NaN for an
            empty bin.
        counts: int64 [num_bins], the number of examples per bin.

    Example:
    >>> curve = reliability_curve([0, 1], [[0.9, 0.1], [0.8, 0.2]], num_bins=2)
    >>> curve.counts, curve.accuracy
    (array([0, 2]), array([nan, 0.5]))
    """

    __slots__ = ()


_TINY64 = float(np.finfo(np.float64).tiny)
# -log of the clip value: the largest per-example NLL the functions report.
MAX_NLL = -math.log(_TINY64)


def check_num_bins(num_bins):
    """`num_bins` as an int >= 1 (the reliability bins of the NumPy and streaming ECE)."""
    return check.integer("num_bins", num_bins)



def _check_labels(labels):
    labels = check.array("labels", labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(
            f"`labels` must have shape [n] or [n, 1] (integer class ids), got shape "
            f"{labels.shape}."
        )
    if labels.size == 0:
        raise ValueError("`labels` is empty; the scores need at least one example.")
    if np.issubdtype(labels.dtype, np.floating):
        # Keras pipelines often carry class ids as floats; whole numbers are ids.
        bad = ~np.isfinite(labels) | (labels != np.round(labels))
        if bad.any():
            raise ValueError(
                f"`labels` must be integer class ids, got the value {float(labels[bad][0])!r} "
                f"at index {int(np.flatnonzero(bad)[0])}."
            )
        labels = labels.astype(np.int64)
    elif not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"`labels` must be integer class ids, got dtype {labels.dtype}.")
    return labels.astype(np.int64)


def _check_probs(probs, name="probs"):
    """`probs` as float64 [n, K], K >= 2, rows in [0, 1] summing to 1; errors name `name`."""
    probs = check.array(name, probs)
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise ValueError(
            f"`{name}` must have shape [n, K] with K >= 2 classes, got shape {probs.shape}."
        )
    if probs.shape[0] == 0:
        raise ValueError(f"`{name}` is empty (shape {probs.shape}).")
    if not (np.issubdtype(probs.dtype, np.floating) or np.issubdtype(probs.dtype, np.integer)):
        raise ValueError(f"`{name}` must be numeric, got dtype {probs.dtype}.")
    probs = probs.astype(np.float64)
    if not np.all(np.isfinite(probs)):
        row = int(np.flatnonzero(~np.all(np.isfinite(probs), axis=1))[0])
        raise ValueError(f"`{name}` must be finite, got {probs[row]} in row {row}.")
    if probs.min() < 0.0 or probs.max() > 1.0:
        raise ValueError(
            f"`{name}` must lie in [0, 1], got values from {float(probs.min())!r} to "
            f"{float(probs.max())!r}."
        )
    # Probabilities usually arrive as float32 softmax outputs: each entry is
    # rounded (relative error eps32/2) and the normaliser is a float32 sum of
    # K terms (relative error up to (K-1) eps32), so a row can miss 1 by about
    # K * eps32 = 1.2e-4 for K = 1000. 1e-3 leaves room for that and for
    # averaging Monte Carlo samples, grown with K for very many classes; it
    # still rejects logits or unnormalised scores.
    tolerance = max(1e-3, 2.0 * probs.shape[1] * float(np.finfo(np.float32).eps))
    error = np.abs(probs.sum(axis=1) - 1.0)
    if np.any(error > tolerance):
        row = int(np.argmax(error))
        raise ValueError(
            f"`{name}` rows must sum to 1 (tolerance {tolerance:.1e}); row {row} sums to "
            f"{float(probs[row].sum())!r}."
        )
    return probs


def _check_pair(labels, probs):
    labels, probs = _check_labels(labels), _check_probs(probs)
    if labels.shape[0] != probs.shape[0]:
        raise ValueError(
            f"`labels` has {labels.shape[0]} examples but `probs` has {probs.shape[0]} "
            f"(shape {probs.shape})."
        )
    num_classes = probs.shape[1]
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        raise ValueError(
            f"`labels` must lie in [0, {num_classes}) for probs with {num_classes} "
            f"classes, got {int(labels[bad][0])} at index {int(np.flatnonzero(bad)[0])}."
        )
    return labels, probs


def _check_scores(scores_in, scores_out):
    """The OOD scores of `auroc`, `aupr` and `fpr_at_95_tpr`: two 1-D finite float64 arrays."""
    return check.vector("scores_in", scores_in), check.vector("scores_out", scores_out)


def _bin_index(confidence, edges):
    # Number of edges strictly below the confidence, minus one: bin b is
    # (edges[b], edges[b+1]], a confidence of 1.0 falls in the last bin.
    return np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, len(edges) - 2)


def reliability_curve(labels, probs, num_bins: int = 15) -> ReliabilityCurve:
    """Mean confidence and accuracy in equal-width confidence bins.

    Confidence is max_k probs[i, k], the prediction is its arg max (the
    lowest class index on ties). Bin b covers (edges[b], edges[b+1]] with
    edges = linspace(0, 1, num_bins + 1): right-closed, so a confidence of
    exactly 1.0 lands in the last bin.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        num_bins: number of bins, an int >= 1.

    Returns:
        A `ReliabilityCurve(edges, confidence, accuracy, counts)`: edges of
        shape [num_bins + 1], per-bin mean confidence and accuracy of shape
        [num_bins] (NaN where a bin is empty), int64 counts.

    Example:
    >>> y_test = np.array([0, 0, 1, 1])
    >>> probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.45, 0.55]])
    >>> curve = reliability_curve(y_test, probs, num_bins=5)
    >>> curve.counts
    array([0, 0, 2, 1, 1])
    >>> curve.accuracy - curve.confidence   # > 0: under-confident bins
    array([  nan,   nan, 0.425, 0.3  , 0.1  ])
    """
    num_bins = check_num_bins(num_bins)
    labels, probs = _check_pair(labels, probs)
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    bins = _bin_index(confidence, edges)
    counts = np.bincount(bins, minlength=num_bins).astype(np.int64)
    conf_sum = np.bincount(bins, weights=confidence, minlength=num_bins)
    correct_sum = np.bincount(bins, weights=correct, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.where(counts > 0, conf_sum / counts, np.nan)
        mean_acc = np.where(counts > 0, correct_sum / counts, np.nan)
    return ReliabilityCurve(edges, mean_conf, mean_acc, counts)


def expected_calibration_error(labels, probs, num_bins: int = 15) -> float:
    """Expected calibration error with equal-width confidence bins.

    ECE = sum_b (n_b / n) |acc_b - conf_b| (Guo et al. 2017, eq. 3), with the
    bins of `reliability_curve`; empty bins contribute nothing.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        num_bins: number of bins, an int >= 1.

    Returns:
        The ECE, a float in [0, 1].

    Example:
    >>> y_test = np.array([0, 0, 1, 1])
    >>> probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.45, 0.55]])
    >>> round(expected_calibration_error(y_test, probs, num_bins=5), 4)   # all correct
    0.3125
    """
    curve = reliability_curve(labels, probs, num_bins)
    filled = curve.counts > 0
    gaps = np.abs(curve.accuracy[filled] - curve.confidence[filled])
    return float(np.sum(curve.counts[filled] * gaps) / np.sum(curve.counts))


def negative_log_likelihood(labels, probs) -> float:
    """Mean negative log-likelihood -log p[label] of the true classes.

    p[label] is clipped below at the smallest positive normal float64
    (2.2e-308), so a zero probability costs -log(2.2e-308) = 708.4 instead of
    infinity and one confident mistake cannot make the mean infinite.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.

    Returns:
        The mean NLL in nats, a float >= 0.

    Example:
    >>> round(negative_log_likelihood([0, 1], [[0.9, 0.1], [0.5, 0.5]]), 3)  # (-log .9 - log .5) / 2
    0.399
    """
    labels, probs = _check_pair(labels, probs)
    p_true = probs[np.arange(len(labels)), labels]
    return float(np.mean(-np.log(np.maximum(p_true, _TINY64))))


def brier_score(labels, probs) -> float:
    """Multi-class Brier score (Brier 1950): mean_i sum_k (p_ik - onehot_ik)^2.

    The sum over classes is Brier's original definition, so the score lies
    in [0, 2]; it is not divided by K.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.

    Returns:
        The Brier score, a float in [0, 2].

    Example:
    >>> brier_score([0], [[0.75, 0.25]])  # 0.25^2 + 0.25^2
    0.125
    """
    labels, probs = _check_pair(labels, probs)
    onehot = np.eye(probs.shape[1])[labels]
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def accuracy(labels, probs) -> float:
    """Fraction of examples whose arg max class (lowest index on ties) is the label.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.

    Returns:
        The accuracy, a float in [0, 1].

    Example:
    >>> accuracy([0, 1], [[0.9, 0.1], [0.6, 0.4]])
    0.5
    """
    labels, probs = _check_pair(labels, probs)
    return float(np.mean(probs.argmax(axis=1) == labels))


def auroc(scores_in, scores_out) -> float:
    """Area under the ROC curve for detecting out-of-distribution inputs.

    Out-of-distribution examples are the positives and a higher score means
    "more likely OOD" (predictive entropy, mutual information, ...). The
    area is the Mann-Whitney statistic

        AUROC = P(s_out > s_in) + 0.5 P(s_out == s_in)

    over all (in, out) pairs, computed from mid-ranks of the pooled scores
    in O(N log N): AUROC = (R_out - m (m + 1) / 2) / (n m), with R_out the
    rank sum of the m OOD scores and n in-distribution scores.

    Args:
        scores_in: scores of in-distribution inputs, 1-D, finite, non-empty.
        scores_out: scores of out-of-distribution inputs, 1-D, finite, non-empty.

    Returns:
        The AUROC, a float in [0, 1] (0.5 = no separation).

    Example:
    >>> auroc([0.1, 0.2], [0.3, 0.2])   # pairs: 1, 1, 1, tie -> 3.5 / 4
    0.875
    """
    scores_in, scores_out = _check_scores(scores_in, scores_out)
    pooled = np.concatenate([scores_in, scores_out])
    _, group, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    # Mid-rank of a group of tied values: ranks run from end - count + 1 to end.
    ends = np.cumsum(counts).astype(np.float64)
    mid_ranks = ends - 0.5 * (counts - 1)
    n_in, n_out = scores_in.size, scores_out.size
    rank_sum_out = float(np.sum(mid_ranks[group.reshape(-1)[n_in:]]))
    return (rank_sum_out - 0.5 * n_out * (n_out + 1)) / (float(n_in) * n_out)

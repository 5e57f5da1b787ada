"""Calibration and out-of-distribution scores for classifiers.

The NumPy functions score predictive probabilities held in memory (for
example the Monte Carlo average of a Bayesian network's softmax outputs):
they validate their inputs, compute in float64 and return Python floats.
The Keras metrics accumulate the same quantities batch by batch inside
compiled train and test steps:

    ECE   = sum_b (n_b / n) |acc_b - conf_b|     (Guo et al. 2017, eq. 3)
    NLL   = mean_i -log p_i[y_i]
    Brier = mean_i sum_k (p_ik - [y_i == k])^2  (Brier 1950, multi-class)

A streaming metric over a dataset equals the NumPy function over the
concatenated batches (up to float32 accumulation). Inside a compiled step
labels cannot be range-checked: a label outside [0, K) counts as a wrong
prediction with probability 0. Pass them in `weighted_metrics` for Keras to
apply sample weights.

For regression outputs [means, log variances] `MeanRMSE` scores the means
(see `tfp_bnn.regression_metrics`).
"""

import collections
import math
import operator

import keras
import numpy as np

# The regression metric lives in its own module; `tfp_bnn.metrics.MeanRMSE` is its name.
from tfp_bnn.regression_metrics import MeanRMSE  # noqa: F401

ReliabilityCurve = collections.namedtuple(
    "ReliabilityCurve", ["edges", "confidence", "accuracy", "counts"]
)
ReliabilityCurve.__doc__ = """Per-bin calibration statistics from `reliability_curve`.

Bin b holds the examples whose confidence lies in (edges[b], edges[b+1]]
(bin 0 also holds a confidence of exactly 0). `confidence` and `accuracy`
are per-bin means, NaN for an empty bin; `counts` is the int64 number of
examples per bin."""

_TINY64 = float(np.finfo(np.float64).tiny)
# -log of the clip value: the largest per-example NLL the functions report.
_MAX_NLL = -math.log(_TINY64)


def _as_array(values, name):
    try:
        return np.asarray(values)
    except ValueError:
        raise ValueError(f"`{name}` is ragged: its rows do not all have the same length.") from None


def _check_num_bins(num_bins):
    if isinstance(num_bins, bool):
        raise ValueError(f"`num_bins` must be an int >= 1, got {num_bins!r}.")
    try:
        num_bins = operator.index(num_bins)
    except TypeError:
        raise ValueError(f"`num_bins` must be an int >= 1, got {num_bins!r}.") from None
    if num_bins < 1:
        raise ValueError(f"`num_bins` must be an int >= 1, got {num_bins!r}.")
    return num_bins


def _check_labels(labels):
    labels = _as_array(labels, "labels")
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


def _check_probs(probs):
    probs = _as_array(probs, "probs")
    if probs.ndim != 2 or probs.shape[1] < 2:
        raise ValueError(
            f"`probs` must have shape [n, K] with K >= 2 classes, got shape {probs.shape}."
        )
    if probs.shape[0] == 0:
        raise ValueError(f"`probs` is empty (shape {probs.shape}).")
    if not (np.issubdtype(probs.dtype, np.floating) or np.issubdtype(probs.dtype, np.integer)):
        raise ValueError(f"`probs` must be numeric, got dtype {probs.dtype}.")
    probs = probs.astype(np.float64)
    if not np.all(np.isfinite(probs)):
        row = int(np.flatnonzero(~np.all(np.isfinite(probs), axis=1))[0])
        raise ValueError(f"`probs` must be finite, got {probs[row]} in row {row}.")
    if probs.min() < 0.0 or probs.max() > 1.0:
        raise ValueError(
            f"`probs` must lie in [0, 1], got values from {float(probs.min())!r} to "
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
            f"`probs` rows must sum to 1 (tolerance {tolerance:.1e}); row {row} sums to "
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
    >>> curve = reliability_curve(y_test, probs, num_bins=10)
    >>> curve.accuracy - curve.confidence   # > 0: under-confident bins
    """
    num_bins = _check_num_bins(num_bins)
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
    >>> expected_calibration_error(y_test, probs)
    0.031
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
    >>> negative_log_likelihood([0, 1], [[0.9, 0.1], [0.5, 0.5]])  # (-log .9 - log .5) / 2
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


def _check_scores(scores, name):
    scores = _as_array(scores, name)
    if scores.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {scores.shape}.")
    if scores.size == 0:
        raise ValueError(f"`{name}` is empty; AUROC needs at least one score on each side.")
    if not (np.issubdtype(scores.dtype, np.floating) or np.issubdtype(scores.dtype, np.integer)):
        raise ValueError(f"`{name}` must be numeric, got dtype {scores.dtype}.")
    scores = scores.astype(np.float64)
    bad = ~np.isfinite(scores)
    if bad.any():
        raise ValueError(
            f"`{name}` must be finite, got {float(scores[bad][0])!r} at index "
            f"{int(np.flatnonzero(bad)[0])}."
        )
    return scores


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
    scores_in = _check_scores(scores_in, "scores_in")
    scores_out = _check_scores(scores_out, "scores_out")
    pooled = np.concatenate([scores_in, scores_out])
    _, group, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    # Mid-rank of a group of tied values: ranks run from end - count + 1 to end.
    ends = np.cumsum(counts).astype(np.float64)
    mid_ranks = ends - 0.5 * (counts - 1)
    n_in, n_out = scores_in.size, scores_out.size
    rank_sum_out = float(np.sum(mid_ranks[group.reshape(-1)[n_in:]]))
    return (rank_sum_out - 0.5 * n_out * (n_out + 1)) / (float(n_in) * n_out)


# --- Streaming Keras metrics -------------------------------------------------


def _sparse_targets(y_true, y_pred, metric_name):
    """Returns (labels [batch] int32, num_classes) for sparse or one-hot y_true."""
    y_pred_shape = tuple(y_pred.shape)
    if len(y_pred_shape) != 2 or y_pred_shape[-1] is None or y_pred_shape[-1] < 2:
        raise ValueError(
            f"{metric_name} expects `y_pred` of shape [batch, K] with a known K >= 2, "
            f"got shape {y_pred_shape}."
        )
    num_classes = y_pred_shape[-1]
    y_true = keras.ops.convert_to_tensor(y_true)
    y_true_shape = tuple(y_true.shape)
    if len(y_true_shape) == 2 and y_true_shape[-1] == num_classes:
        y_true = keras.ops.argmax(y_true, axis=-1)  # one-hot targets
    elif len(y_true_shape) == 2 and y_true_shape[-1] == 1:
        y_true = keras.ops.reshape(y_true, (-1,))
    elif len(y_true_shape) != 1:
        raise ValueError(
            f"{metric_name} expects sparse `y_true` of shape [batch] or [batch, 1], or "
            f"one-hot of shape {y_pred_shape}; got shape {y_true_shape}."
        )
    return keras.ops.cast(y_true, "int32"), num_classes


def _check_metric_dtype(dtype, metric_name):
    # Counts accumulate in the metric's dtype; float16 stops counting at 2048.
    if dtype not in ("float32", "float64"):
        raise ValueError(f"{metric_name} needs dtype float32 or float64, got {dtype!r}.")


class _StreamingClassificationMetric(keras.metrics.Metric):
    """Shared plumbing: targets, probabilities, weights and the config."""

    def __init__(self, from_logits=False, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        _check_metric_dtype(self.dtype, type(self).__name__)
        self.from_logits = bool(from_logits)

    def _prepare(self, y_true, y_pred, sample_weight):
        y_pred = keras.ops.cast(keras.ops.convert_to_tensor(y_pred), self.dtype)
        labels, num_classes = _sparse_targets(y_true, y_pred, type(self).__name__)
        # softmax and log_softmax subtract the row max: finite for |logits| ~ 1e3.
        probs = keras.ops.softmax(y_pred, axis=-1) if self.from_logits else y_pred
        if sample_weight is None:
            weights = keras.ops.ones_like(probs[:, 0])
        else:
            weights = keras.ops.cast(keras.ops.convert_to_tensor(sample_weight), self.dtype)
            weights = keras.ops.broadcast_to(
                keras.ops.reshape(weights, (-1,)), keras.ops.shape(probs[:, 0])
            )
        onehot = keras.ops.one_hot(labels, num_classes, dtype=self.dtype)
        return onehot, probs, y_pred, weights

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


class _WeightedMean(_StreamingClassificationMetric):
    """Weighted mean over examples of a per-example score `_per_example`."""

    def __init__(self, from_logits=False, name=None, dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self.total = self.add_variable((), "zeros", name="total")
        self.count = self.add_variable((), "zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        onehot, probs, y_pred, weights = self._prepare(y_true, y_pred, sample_weight)
        values = self._per_example(onehot, probs, y_pred)
        self.total.assign_add(keras.ops.sum(weights * values))
        self.count.assign_add(keras.ops.sum(weights))

    def result(self):
        return keras.ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NegativeLogLikelihood(_WeightedMean):
    """Streaming mean negative log-likelihood -log p[label].

    Equals `negative_log_likelihood` on all batches seen. With
    `from_logits=True` the per-example value is -log_softmax(logits)[label],
    exact and finite even where the probability underflows. On
    probabilities, p[label] below the dtype's smallest normal (1.2e-38 in
    float32, where TensorFlow flushes subnormals to zero) costs 708.4 like a
    zero probability in the NumPy function.

    Args:
        from_logits: whether `y_pred` holds logits rather than probabilities.
        name: name of the metric.
        dtype: float32 (default) or float64, the accumulation dtype.

    Call arguments:
        y_true: class ids of shape [batch] or [batch, 1], or one-hot [batch, K].
        y_pred: probabilities (or logits) of shape [batch, K].
        sample_weight: optional weights of shape [batch].

    Example:
    >>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
    ...               metrics=[NegativeLogLikelihood(), BrierScore(),
    ...                        ExpectedCalibrationError()])
    """

    def __init__(self, from_logits=False, name="nll", dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)

    def _per_example(self, onehot, probs, y_pred):
        if self.from_logits:
            # where, not onehot * log p: a log p of -inf (|logits| ~ 1e38) would give NaN.
            log_probs = keras.ops.log_softmax(y_pred, axis=-1)
            return -keras.ops.sum(keras.ops.where(onehot > 0, log_probs, 0.0), axis=-1)
        p_true = keras.ops.sum(onehot * probs, axis=-1)
        tiny = float(np.finfo(self.dtype).tiny)
        safe_log = keras.ops.log(keras.ops.maximum(p_true, tiny))
        return keras.ops.where(p_true >= tiny, -safe_log, _MAX_NLL)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BrierScore(_WeightedMean):
    """Streaming multi-class Brier score, mean of sum_k (p_k - onehot_k)^2.

    Equals `brier_score` (Brier 1950, summed over classes, range [0, 2]) on
    all batches seen. `from_logits=True` applies a softmax first.

    Args:
        from_logits: whether `y_pred` holds logits rather than probabilities.
        name: name of the metric.
        dtype: float32 (default) or float64, the accumulation dtype.

    Call arguments:
        y_true: class ids of shape [batch] or [batch, 1], or one-hot [batch, K].
        y_pred: probabilities (or logits) of shape [batch, K].
        sample_weight: optional weights of shape [batch].

    Example:
    >>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
    ...               metrics=[BrierScore()])
    """

    def __init__(self, from_logits=False, name="brier", dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)

    def _per_example(self, onehot, probs, y_pred):
        return keras.ops.sum(keras.ops.square(probs - onehot), axis=-1)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ExpectedCalibrationError(_StreamingClassificationMetric):
    """Streaming expected calibration error over equal-width confidence bins.

    Accumulates, per bin, the summed weight, confidence and correctness of
    every example seen; the result is sum_b |correct_b - confidence_b| / n,
    i.e. `expected_calibration_error` on the concatenated batches (Guo et
    al. 2017, eq. 3). Bins are right-closed, (edges[b], edges[b+1]], as in
    `reliability_curve`; ties in the arg max go to the lowest class index.

    Args:
        num_bins: number of bins on [0, 1], an int >= 1.
        from_logits: whether `y_pred` holds logits rather than probabilities.
        name: name of the metric.
        dtype: float32 (default) or float64, the accumulation dtype.

    Call arguments:
        y_true: class ids of shape [batch] or [batch, 1], or one-hot [batch, K].
        y_pred: probabilities (or logits) of shape [batch, K].
        sample_weight: optional weights of shape [batch].

    Example:
    >>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
    ...               metrics=[ExpectedCalibrationError(num_bins=10)])
    """

    def __init__(self, num_bins=15, from_logits=False, name="ece", dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self.num_bins = _check_num_bins(num_bins)
        edges = np.linspace(0.0, 1.0, self.num_bins + 1)[:-1]
        # Round the float64 edges down to the metric dtype: for a value c of
        # that dtype, c > rounded-down edge exactly when c > float64 edge, so
        # the bins are those of `reliability_curve` without float64 math.
        lower = edges.astype(self.dtype)
        self._lower_edges = np.where(lower > edges, np.nextafter(lower, -np.inf), lower)
        self.bin_weight = self.add_variable((self.num_bins,), "zeros", name="bin_weight")
        self.bin_confidence = self.add_variable((self.num_bins,), "zeros", name="bin_confidence")
        self.bin_correct = self.add_variable((self.num_bins,), "zeros", name="bin_correct")

    def update_state(self, y_true, y_pred, sample_weight=None):
        onehot, probs, _, weights = self._prepare(y_true, y_pred, sample_weight)
        confidence = keras.ops.max(probs, axis=-1)
        # The lowest index among the maxima, as np.argmax does.
        num_classes = probs.shape[-1]
        is_max = probs >= confidence[:, None]
        predicted_onehot = keras.ops.one_hot(
            keras.ops.min(keras.ops.where(is_max, keras.ops.arange(num_classes), num_classes),
                          axis=-1),
            num_classes,
            dtype=self.dtype,
        )
        correct = keras.ops.sum(predicted_onehot * onehot, axis=-1)
        above = keras.ops.cast(confidence[:, None] > self._lower_edges[None, :], "int32")
        bins = keras.ops.clip(keras.ops.sum(above, axis=-1) - 1, 0, self.num_bins - 1)
        sums = keras.ops.segment_sum(
            keras.ops.stack([weights, weights * confidence, weights * correct], axis=-1),
            bins,
            num_segments=self.num_bins,
        )
        self.bin_weight.assign_add(sums[:, 0])
        self.bin_confidence.assign_add(sums[:, 1])
        self.bin_correct.assign_add(sums[:, 2])

    def result(self):
        gap = keras.ops.sum(keras.ops.abs(self.bin_correct - self.bin_confidence))
        return keras.ops.divide_no_nan(gap, keras.ops.sum(self.bin_weight))

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins}

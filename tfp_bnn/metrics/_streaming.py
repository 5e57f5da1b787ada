"""Streaming Keras classification metrics: NLL, Brier score and ECE inside compiled steps.

Each equals its NumPy function in `tfp_bnn.metrics` on the concatenated batches (up to float32
accumulation). Inside a compiled step labels cannot be range-checked: a label outside [0, K)
counts as a wrong prediction with probability 0.
"""

import keras
import numpy as np

from tfp_bnn.metrics._scores import MAX_NLL
from tfp_bnn.metrics._scores import check_num_bins


def _lower_bin_edges(num_bins, dtype):
    """Lower edges of `num_bins` equal-width bins on [0, 1], rounded down to `dtype`.

    For a value c of that dtype, c > rounded-down edge exactly when c > float64
    edge, so the bins are those of `reliability_curve` without float64 math.
    """
    edges = np.linspace(0.0, 1.0, num_bins + 1)[:-1]
    lower = edges.astype(dtype)
    return np.where(lower > edges, np.nextafter(lower, -np.inf), lower)


def _bin_indices(values, lower_edges):
    """The right-closed bin (edges[b], edges[b+1]] of each value (any shape), int32.

    Bin 0 also holds a value of exactly 0, as in `reliability_curve`.
    """
    above = keras.ops.cast(keras.ops.expand_dims(values, -1) > lower_edges, "int32")
    return keras.ops.clip(keras.ops.sum(above, axis=-1) - 1, 0, len(lower_edges) - 1)


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
    >>> metric = NegativeLogLikelihood()
    >>> metric.update_state([0, 1], [[0.9, 0.1], [0.5, 0.5]])
    >>> round(float(metric.result()), 4)   # (-log 0.9 - log 0.5) / 2
    0.3993
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
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
        return keras.ops.where(p_true >= tiny, -safe_log, MAX_NLL)


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
    >>> metric = BrierScore(from_logits=True)
    >>> metric.update_state([0], [[0.0, 0.0]])   # p = (0.5, 0.5)
    >>> float(metric.result())   # 0.5^2 + 0.5^2
    0.5
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
    >>> metric = ExpectedCalibrationError(num_bins=10)
    >>> metric.update_state([0, 1], [[0.95, 0.05], [0.75, 0.25]])
    >>> round(float(metric.result()), 4)   # (|1 - 0.95| + |0 - 0.75|) / 2
    0.4
    """

    def __init__(self, num_bins=15, from_logits=False, name="ece", dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self.num_bins = check_num_bins(num_bins)
        self._lower_edges = _lower_bin_edges(self.num_bins, self.dtype)
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
        bins = _bin_indices(confidence, self._lower_edges)
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

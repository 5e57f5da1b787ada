"""Calibration errors beyond the top-label ECE: adaptive (equal-mass) bins and classwise.

    ACE           = sum_b (n_b / n) |acc_b - conf_b|, bins of equal mass  (Nixon et al. 2019)
    classwise-ECE = (1/K) sum_k sum_b (n_bk / n) |freq_bk - conf_bk|     (Kull et al. 2019)

The NumPy functions validate their inputs, compute in float64 and return Python floats;
`ClasswiseCalibrationError` accumulates the classwise ECE batch by batch inside compiled
steps. Exported as `tfp_bnn.metrics.<name>`.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.metrics._scores import _bin_index
from tfp_bnn.metrics._scores import _check_pair
from tfp_bnn.metrics._scores import check_num_bins
from tfp_bnn.metrics._streaming import _StreamingClassificationMetric
from tfp_bnn.metrics._streaming import _bin_indices
from tfp_bnn.metrics._streaming import _lower_bin_edges


def adaptive_calibration_error(labels, probs, num_bins: int = 15) -> float:
    """Calibration error of the top label with equal-mass (adaptive) confidence bins.

    The examples, sorted by confidence max_k probs[i, k] (a stable sort:
    the lower index first among equal confidences), are cut into
    `num_bins` consecutive bins whose sizes differ by at most one (the
    first n mod num_bins bins hold one more); then, as for the ECE,

        ACE = sum_b (n_b / n) |acc_b - conf_b|

    This is the adaptive binning of Nixon et al. 2019 ("Measuring
    calibration in deep learning") applied to the top label, as
    torch-uncertainty's adaptive calibration error is (Nixon et al. also
    define a variant over all classes). With n a multiple of num_bins every
    bin weighs 1 / num_bins, as in their definition. Bins with no example
    (num_bins > n) are skipped. Equal-mass bins give every bin the same
    number of examples, where equal-width bins leave most of them nearly
    empty when confidences crowd near 1.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        num_bins: number of bins, an int >= 1.

    Returns:
        The ACE, a float in [0, 1].

    Example:
    >>> labels = [0, 1, 1, 0]
    >>> probs = [[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.2, 0.8]]
    >>> adaptive_calibration_error(labels, probs, num_bins=2)   # (|1 - 1.3| + |1 - 1.7|) / 4
    0.25
    """
    num_bins = check_num_bins(num_bins)
    labels, probs = _check_pair(labels, probs)
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    order = np.argsort(confidence, kind="stable")
    gap = 0.0
    for members in np.array_split(order, num_bins):
        # |sum correct - sum confidence| = n_b |acc_b - conf_b|; an empty bin adds 0.
        gap += abs(np.sum(correct[members]) - np.sum(confidence[members]))
    return float(gap / labels.size)


def classwise_calibration_error(labels, probs, num_bins: int = 15) -> float:
    """Classwise ECE: the mean over classes of the binned calibration error of p_k.

    For each class k, the probabilities p_ik are put in the equal-width
    bins of `reliability_curve` ((edges[b], edges[b+1]], bin 0 also holding
    0) and compared with the one-vs-rest frequency of the class:

        classwise-ECE = (1/K) sum_k sum_b (n_bk / n) |freq_bk - conf_bk|

    with freq_bk the fraction of examples of bin b whose label is k and
    conf_bk their mean p_k (Kull et al. 2019, "Beyond temperature
    scaling"). Every class counts, however rare, and every
    probability, not only the top one; empty bins contribute nothing.

    Args:
        labels: integer class ids, shape [n] or [n, 1].
        probs: predictive probabilities, shape [n, K], rows summing to 1.
        num_bins: number of bins per class, an int >= 1.

    Returns:
        The classwise ECE, a float in [0, 1].

    Example:
    >>> round(classwise_calibration_error([0, 1], [[0.75, 0.25], [0.75, 0.25]], num_bins=2), 4)
    0.25
    """
    num_bins = check_num_bins(num_bins)
    labels, probs = _check_pair(labels, probs)
    num_classes = probs.shape[1]
    onehot = np.eye(num_classes)[labels]
    bins = _bin_index(probs, np.linspace(0.0, 1.0, num_bins + 1))
    # One segment per (class, bin): index k * num_bins + b.
    segments = (np.arange(num_classes) * num_bins + bins).reshape(-1)
    size = num_classes * num_bins
    gaps = (np.bincount(segments, weights=onehot.reshape(-1), minlength=size)
            - np.bincount(segments, weights=probs.reshape(-1), minlength=size))
    return float(np.sum(np.abs(gaps)) / (num_classes * labels.size))


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ClasswiseCalibrationError(_StreamingClassificationMetric):
    """Streaming classwise ECE over equal-width bins of every class probability.

    Accumulates, per class k and bin b, the summed weight, probability p_k
    and label indicator [y == k] of every example seen; the result is
    sum_kb |freq_kb - conf_kb| / (K n), i.e. `classwise_calibration_error`
    on the concatenated batches (Kull et al. 2019), up to float32
    accumulation. Bins are right-closed, (edges[b], edges[b+1]], as in
    `reliability_curve`. The number of classes is fixed at construction,
    since the per-class sums are the metric's variables.

    Args:
        num_classes: number of classes K, an int >= 2.
        num_bins: number of bins on [0, 1] per class, an int >= 1.
        from_logits: whether `y_pred` holds logits rather than probabilities.
        name: name of the metric.
        dtype: float32 (default) or float64, the accumulation dtype.

    Call arguments:
        y_true: class ids of shape [batch] or [batch, 1], or one-hot [batch, K].
        y_pred: probabilities (or logits) of shape [batch, K].
        sample_weight: optional weights of shape [batch].

    Example:
    >>> metric = ClasswiseCalibrationError(num_classes=2, num_bins=2)
    >>> metric.update_state([0, 1], [[0.75, 0.25], [0.75, 0.25]])
    >>> float(metric.result())   # per class: |1 - 1.5| / 2 and |1 - 0.5| / 2
    0.25
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    >>> model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
    ...               metrics=[ClasswiseCalibrationError(num_classes=3)])
    """

    def __init__(self, num_classes, num_bins=15, from_logits=False, name="classwise_ece",
                 dtype=None):
        super().__init__(from_logits=from_logits, name=name, dtype=dtype)
        self.num_classes = check.integer("num_classes", num_classes, minimum=2)
        self.num_bins = check_num_bins(num_bins)
        self._lower_edges = _lower_bin_edges(self.num_bins, self.dtype)
        shape = (self.num_classes, self.num_bins)
        self.bin_weight = self.add_variable(shape, "zeros", name="bin_weight")
        self.bin_confidence = self.add_variable(shape, "zeros", name="bin_confidence")
        self.bin_frequency = self.add_variable(shape, "zeros", name="bin_frequency")

    def update_state(self, y_true, y_pred, sample_weight=None):
        onehot, probs, _, weights = self._prepare(y_true, y_pred, sample_weight)
        if probs.shape[-1] != self.num_classes:
            raise ValueError(
                f"ClasswiseCalibrationError was built for num_classes={self.num_classes}, "
                f"got `y_pred` of shape {tuple(probs.shape)}."
            )
        bins = _bin_indices(probs, self._lower_edges)  # [batch, K]
        segments = keras.ops.reshape(
            bins + keras.ops.arange(self.num_classes, dtype="int32")[None, :] * self.num_bins,
            (-1,),
        )
        weights = keras.ops.broadcast_to(weights[:, None], keras.ops.shape(probs))
        values = keras.ops.stack([weights, weights * probs, weights * onehot], axis=-1)
        sums = keras.ops.segment_sum(
            keras.ops.reshape(values, (-1, 3)),
            segments,
            num_segments=self.num_classes * self.num_bins,
        )
        shape = (self.num_classes, self.num_bins)
        self.bin_weight.assign_add(keras.ops.reshape(sums[:, 0], shape))
        self.bin_confidence.assign_add(keras.ops.reshape(sums[:, 1], shape))
        self.bin_frequency.assign_add(keras.ops.reshape(sums[:, 2], shape))

    def result(self):
        gap = keras.ops.sum(keras.ops.abs(self.bin_frequency - self.bin_confidence))
        # Every example adds its weight once to each class's row.
        return keras.ops.divide_no_nan(gap, keras.ops.sum(self.bin_weight))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "num_bins": self.num_bins}

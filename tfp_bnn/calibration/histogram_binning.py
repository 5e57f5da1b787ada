"""Histogram binning (Zadrozny and Elkan 2001, "Obtaining calibrated probability estimates
from decision trees and naive Bayesian classifiers", ICML), one-vs-rest per class.

Each class's probability axis [0, 1] is cut into `num_bins` equal-width bins; a row whose
p_k falls in bin b gets the held-out frequency of class k among the rows in that bin. An
empty bin keeps the identity (its midpoint). Then the K values are renormalised.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.calibration._one_vs_rest import OneVsRestCalibration


@keras.saving.register_keras_serializable(package="tfp_bnn")
class HistogramBinning(OneVsRestCalibration):
    """Maps each class probability to its held-out bin frequency, then renormalises.

    Args:
        num_bins: equal-width bins of [0, 1] per class (>= 1).
        from_logits: True (default) if the layer receives logits; False for probabilities.
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: a classifier's outputs [..., K].

    Returns:
        The log of the calibrated probabilities [..., K] (logits).

    Example:
    >>> rng = np.random.default_rng(0)
    >>> logits = 4.0 * rng.normal(size=(1000, 3))           # 4x too sharp
    >>> labels = np.array([rng.choice(3, p=np.exp(z / 4) / np.exp(z / 4).sum()) for z in logits])
    >>> layer = tfp_bnn.calibration.HistogramBinning(num_bins=10).fit(logits, labels)
    >>> calibrated = layer.transform(logits)
    >>> bool(calibrated.max(axis=1).mean() < 0.9)   # less confident than the raw softmax
    True
    """

    def __init__(self, num_bins=15, from_logits=True, **kwargs):
        super().__init__(from_logits=from_logits, **kwargs)
        self.num_bins = check.integer("num_bins", num_bins)
        self.num_knots = self.num_bins

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins}

    def _bins(self, p):
        return np.minimum((p * self.num_bins).astype(np.int64), self.num_bins - 1)

    def _fit_class(self, p, hits):
        bins = self._bins(p)
        counts = np.bincount(bins, minlength=self.num_bins)
        totals = np.bincount(bins, weights=hits, minlength=self.num_bins)
        midpoints = (np.arange(self.num_bins) + 0.5) / self.num_bins
        return np.where(counts > 0, totals / np.maximum(counts, 1), midpoints)

    def _read(self, row, p):
        return row[self._bins(p)]

    def _read_ops(self, table, probs):
        scaled = keras.ops.floor(keras.ops.clip(probs, 0.0, 1.0) * self.num_bins)
        index = keras.ops.cast(keras.ops.minimum(scaled, self.num_bins - 1), "int32")
        return self._gather(table, index)

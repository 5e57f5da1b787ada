"""The shallow base of the non-parametric classification calibrators: a per-class map of
the predicted probability, tabulated on a uniform grid of [0, 1], then renormalised.

For class k the map g_k sends p_k to the frequency of [y == k] among held-out rows with a
similar p_k (one-vs-rest, Zadrozny and Elkan 2002); the calibrated probabilities are
g_k(p_k) / sum_j g_j(p_j). A subclass fits g_k (`_fit_class`) and says how the table is
read: as steps (a histogram) or by linear interpolation (isotonic regression). The table
is a non-trainable weight [K, num_knots], saved with the model. The layer returns the
log of the calibrated probabilities (logits).

The map is fitted on predictive probabilities [N, K]; given Monte Carlo samples [S, N, K]
it fits their mean, the predictive `tfp_bnn.predict` averages. Inside a model
(`tfp_bnn.calibration.calibrated`) it maps each sample's probabilities: for a
deterministic network that is the fitted map; for a Bayesian one the predictive then
averages mapped samples, which is not the same as mapping the average (the affine
calibrators, fitted on the mixture itself, have no such gap). `transform` applies the
fitted map to predictive probabilities in NumPy.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn._memory import check_bytes
from tfp_bnn.calibration._logit_calibration import class_labels
from tfp_bnn.calibration._logit_calibration import sampled_logits

# A class whose map is 0 where a row falls would give it probability 0: the floor keeps
# every calibrated probability positive (its log finite).
FLOOR = 1e-6


class OneVsRestCalibration(keras.layers.Layer):
    """Base of `HistogramBinning` and `IsotonicCalibration`.

    A subclass sets `self.num_knots` before `build`, and defines `_fit_class(p, hits)`
    (the table row [num_knots] of one class from its probabilities and 0/1 outcomes) and
    `_read(table, p)` in NumPy and `_read_ops(table, p)` in `keras.ops`.
    """

    def __init__(self, from_logits=True, **kwargs):
        super().__init__(**kwargs)
        self.from_logits = check.boolean("from_logits", from_logits)

    def build(self, input_shape):
        num_classes = input_shape[-1]
        if num_classes is None or num_classes < 2:
            raise ValueError(f"{type(self).__name__} needs a known number of classes >= 2 on "
                             f"the last axis, got input shape {tuple(input_shape)}.")
        self._num_classes = int(num_classes)
        # The table, and the fit's float64 copy of it.
        check_bytes(12 * self._num_classes * self.num_knots,
                    f"{type(self).__name__}'s table of {self._num_classes} classes x "
                    f"{self.num_knots} points", "use fewer bins or knots")
        self.table = self.add_weight(name="table", shape=(self._num_classes, self.num_knots),
                                     initializer=keras.initializers.Constant(
                                         np.linspace(0.0, 1.0, self.num_knots)),
                                     trainable=False)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}

    def _probabilities(self, values):
        """float64 predictive probabilities [N, K] from logits or probabilities (or their
        Monte Carlo samples [S, N, K], averaged)."""
        log_probs = sampled_logits(values, self.from_logits, name="probs")
        shifted = log_probs - log_probs.max(axis=-1, keepdims=True)
        probs = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
        return probs.mean(axis=0)

    def fit(self, probs, labels):
        """Fits the per-class maps on held-out predictions.

        Args:
            probs: held-out outputs [N, K] (or Monte Carlo samples [S, N, K], averaged
                after the softmax): logits, or probabilities if from_logits=False.
            labels: class ids [N] (or one-hot [N, K]).

        Returns:
            self, the table holding the fitted maps.
        """
        probs = self._probabilities(probs)
        labels = class_labels(labels, probs.shape[0], probs.shape[1])
        if not self.built:
            self.build((None, probs.shape[1]))
        elif self._num_classes != probs.shape[1]:
            raise ValueError(f"`probs` have {probs.shape[1]} classes; this layer was built for "
                             f"{self._num_classes}.")
        table = np.stack([self._fit_class(probs[:, k], (labels == k).astype(np.float64))
                          for k in range(probs.shape[1])])
        self.table.assign(table)
        return self

    def transform(self, probs):
        """The calibrated probabilities [N, K] of predictive probabilities `probs` (as
        `fit` takes them), in NumPy float64."""
        probs = self._probabilities(probs)
        table = keras.ops.convert_to_numpy(self.table).astype(np.float64)
        mapped = np.stack([self._read(table[k], probs[:, k]) for k in range(probs.shape[1])],
                          axis=-1)
        mapped = np.maximum(mapped, FLOOR)
        return mapped / mapped.sum(axis=-1, keepdims=True)

    def call(self, inputs):
        z = keras.ops.convert_to_tensor(inputs, self.compute_dtype)
        probs = keras.ops.softmax(z, axis=-1) if self.from_logits else z
        table = keras.ops.cast(self.table, z.dtype)
        mapped = keras.ops.maximum(self._read_ops(table, probs),
                                   keras.ops.cast(FLOOR, z.dtype))
        return keras.ops.log(mapped / keras.ops.sum(mapped, axis=-1, keepdims=True))

    def _positions(self, probs):
        """(lower knot index, fraction past it) of probabilities on the uniform grid."""
        scaled = keras.ops.clip(probs, 0.0, 1.0) * (self.num_knots - 1)
        lower = keras.ops.minimum(keras.ops.floor(scaled), self.num_knots - 2)
        return keras.ops.cast(lower, "int32"), scaled - lower

    def _gather(self, table, index):
        """table [K, G] read at index [..., K] -> [..., K] (per class)."""
        flat = keras.ops.reshape(index, (-1, self._num_classes))
        classes = keras.ops.arange(self._num_classes, dtype="int32")
        picked = keras.ops.take(keras.ops.reshape(table, (-1,)),
                                flat + classes * self.num_knots)
        return keras.ops.reshape(picked, keras.ops.shape(index))

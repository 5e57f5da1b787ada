"""The shallow base of the classification calibrators: a layer that maps a classifier's
logits through a fitted affine map, and its fit on held-out data.

A calibrator is appended to a trained classifier (`tfp_bnn.calibration.calibrated`) and
maps each output the classifier produces: for a Bayesian network each Monte Carlo sample's
logits, so `tfp_bnn.predict.classification` and `tfp_bnn.export_predictive` average the
calibrated samples, and the fit minimises exactly the NLL of that averaged predictive
(`fit` on sampled logits [S, N, K], `fit_predictive` on a model). It returns logits (add
`keras.layers.Softmax()` after it for probabilities); its parameters are non-trainable
weights, saved with the model.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn._memory import check_bytes
from tfp_bnn.calibration import _objective

# Float64 arrays the fit holds: the logits, their map, log-softmax and gradient (and a
# spare), per logit; and L-BFGS's history of steps and gradient changes plus a few vectors,
# per parameter.
_COPIES_PER_LOGIT = 5
_COPIES_PER_PARAMETER = 2 * _objective.HISTORY + 4

# log(p) of a probability below this is taken as log of this (a softmax in float32 never
# gives less than ~1e-45, but its log would be -inf for 0).
_TINY = 1e-300


def sampled_logits(values, from_logits, name="logits"):
    """`values` [N, K] or [S, N, K] as float64 logits [S, N, K], checked."""
    values = check.array(name, values)
    if values.ndim == 2:
        values = values[None]
    if values.ndim != 3 or values.shape[-1] < 2 or 0 in values.shape:
        raise ValueError(f"`{name}` must be [N, K] or [S, N, K] with K >= 2 classes, got "
                         f"shape {values.shape}.")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"`{name}` has NaN or infinite values.")
    if from_logits:
        return values
    if np.any(values < 0) or np.any(np.abs(values.sum(axis=-1) - 1.0) > 1e-3):
        raise ValueError(f"`{name}` must be probabilities (from_logits=False): each row in "
                         "[0, 1], summing to 1.")
    return np.log(np.maximum(values, _TINY))


def class_labels(labels, rows, num_classes):
    """`labels` as int64 [rows] in [0, num_classes) (or one-hot [rows, K]), checked."""
    labels = check.array("labels", labels)
    if labels.ndim == 2 and labels.shape == (rows, num_classes):
        labels = np.argmax(labels, axis=-1)
    elif labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.shape != (rows,):
        raise ValueError(f"`labels` must be [{rows}] class ids (or one-hot [{rows}, "
                         f"{num_classes}]), got shape {labels.shape}.")
    if not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
        raise ValueError("`labels` must be integer class ids.")
    if np.any(labels < 0) or np.any(labels >= num_classes):
        raise ValueError(f"`labels` must lie in [0, {num_classes}), got values from "
                         f"{labels.min():g} to {labels.max():g}.")
    return labels.astype(np.int64)


class LogitCalibration(keras.layers.Layer):
    """Base of `TemperatureScaling`, `VectorScaling` and `MatrixScaling`.

    A subclass defines `_num_parameters(num_classes)`, `_initial(num_classes)` (its
    identity parameters as one flat float64 vector), `_map(z, theta)` and `_pullback(z, mapped, gradient, theta)` in NumPy
    for the fit, `_create_weights(num_classes)`, `_assign(theta)` and `_call_map(z)` in
    `keras.ops` for the layer, and optionally `_penalty(theta)`.
    """

    def __init__(self, from_logits=True, **kwargs):
        super().__init__(**kwargs)
        self.from_logits = check.boolean("from_logits", from_logits)
        self.fit_result = None

    def build(self, input_shape):
        num_classes = input_shape[-1]
        if num_classes is None or num_classes < 2:
            raise ValueError(f"{type(self).__name__} needs a known number of classes >= 2 on "
                             f"the last axis, got input shape {tuple(input_shape)}.")
        self._create_weights(int(num_classes))

    def call(self, inputs):
        z = keras.ops.convert_to_tensor(inputs, self.compute_dtype)
        if not self.from_logits:
            z = keras.ops.log(keras.ops.maximum(z, keras.ops.cast(1e-30, self.compute_dtype)))
        return self._call_map(z)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}

    def _penalty(self, theta):
        return 0.0, np.zeros_like(theta)

    def fit(self, logits, labels, max_iterations=_objective.MAX_ITERATIONS):
        """Fits the map on held-out outputs by minimising the NLL of their predictive.

        Args:
            logits: the classifier's held-out outputs, [N, K], or [S, N, K] Monte Carlo
                samples (averaged after the softmax, as `tfp_bnn.predict` does);
                probabilities if the layer was made with from_logits=False.
            labels: class ids [N] (or one-hot [N, K]).
            max_iterations: L-BFGS iterations, at most.

        Returns:
            self, with `fit_result` = {"nll_before", "nll_after", "iterations",
            "converged"}; the weights hold the fitted map.
        """
        z = sampled_logits(logits, self.from_logits)
        labels = class_labels(labels, z.shape[1], z.shape[2])
        max_iterations = check.integer("max_iterations", max_iterations)
        check_bytes(8 * (_COPIES_PER_LOGIT * z.size
                         + _COPIES_PER_PARAMETER * self._num_parameters(z.shape[-1])),
                    f"{type(self).__name__}'s fit on logits of shape {z.shape}",
                    "fit on fewer rows or Monte Carlo samples (or a map with fewer parameters)")
        if not self.built:
            self.build((None, z.shape[-1]))
        elif self._num_classes != z.shape[-1]:
            raise ValueError(f"`logits` have {z.shape[-1]} classes; this layer was built for "
                             f"{self._num_classes}.")

        def objective(theta):
            mapped = self._map(z, theta)
            value, gradient = _objective.classification_nll(mapped, labels)
            penalty, penalty_gradient = self._penalty(theta)
            return value + penalty, self._pullback(z, mapped, gradient, theta) + penalty_gradient

        start = self._initial(z.shape[-1])
        before, _ = objective(start)
        theta, after, iterations, converged = _objective.minimize(objective, start,
                                                                  max_iterations)
        self._assign(theta)
        self.fit_result = {"nll_before": before, "nll_after": after,
                           "iterations": iterations, "converged": converged}
        return self

    def fit_predictive(self, model, x, labels, num_samples=100, batch_size=None):
        """`fit` on the Monte Carlo samples of `model`'s outputs at held-out inputs `x`.

        Args:
            model: a classifier (logits, or probabilities with from_logits=False).
            x: held-out inputs.
            labels: their class ids (as `fit` takes them).
            num_samples: T of `tfp_bnn.predict.sample` (1 for a deterministic model).
            batch_size: inputs per traced call (default min(N, 1024)).

        Returns:
            self, fitted (see `fit`).
        """
        from tfp_bnn.predict import sampling  # prediction imports layers, not back
        return self.fit(sampling.sample(model, x, num_samples, batch_size=batch_size), labels)

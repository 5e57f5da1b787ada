"""Isotonic calibration (Zadrozny and Elkan 2002, "Transforming classifier scores into
accurate multiclass probability estimates", KDD), one-vs-rest per class.

For class k, the non-decreasing g_k minimising sum_i ([y_i == k] - g_k(p_ik))^2 over the
held-out rows (pool adjacent violators, Ayer et al. 1955), linearly interpolated between
its fitted points and constant beyond them (as scikit-learn's IsotonicRegression with
out_of_bounds="clip" predicts), tabulated on `num_knots` equally spaced points of [0, 1]
and read by linear interpolation between them. Then the K values are renormalised.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.calibration._one_vs_rest import OneVsRestCalibration


def pool_adjacent_violators(x, y):
    """The isotonic least-squares fit of y on x: (distinct sorted x, fitted values there).

    Rows with equal x are pooled first (their mean), then adjacent blocks that decrease are
    merged into their weighted mean until the values are non-decreasing.
    """
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    distinct, start = np.unique(x, return_index=True)
    weights = np.diff(np.append(start, len(x))).astype(np.float64)
    means = np.add.reduceat(y, start) / weights
    values, sizes, spans = [], [], []
    for mean, weight in zip(means, weights):
        values.append(mean)
        sizes.append(weight)
        spans.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            weight = sizes[-2] + sizes[-1]
            merged = (values[-2] * sizes[-2] + values[-1] * sizes[-1]) / weight
            span = spans[-2] + spans[-1]
            del values[-1], sizes[-1], spans[-1]
            values[-1], sizes[-1], spans[-1] = merged, weight, span
    return distinct, np.repeat(values, spans)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IsotonicCalibration(OneVsRestCalibration):
    """Maps each class probability through a fitted non-decreasing function, then
    renormalises.

    Args:
        num_knots: points of [0, 1] the fitted maps are tabulated on (>= 2); between them
            the table is read linearly (101: a step of 0.01).
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
    >>> layer = tfp_bnn.calibration.IsotonicCalibration().fit(logits, labels)
    >>> layer(logits[:2].astype("float32")).shape        # calibrated logits
    TensorShape([2, 3])
    """

    def __init__(self, num_knots=101, from_logits=True, **kwargs):
        super().__init__(from_logits=from_logits, **kwargs)
        self.num_knots = check.integer("num_knots", num_knots, minimum=2)

    def get_config(self):
        return {**super().get_config(), "num_knots": self.num_knots}

    def _fit_class(self, p, hits):
        x, fitted = pool_adjacent_violators(p, hits)
        grid = np.linspace(0.0, 1.0, self.num_knots)
        return np.interp(grid, x, fitted)  # constant beyond the fitted range

    def _read(self, row, p):
        return np.interp(p, np.linspace(0.0, 1.0, self.num_knots), row)

    def _read_ops(self, table, probs):
        lower, fraction = self._positions(probs)
        below = self._gather(table, lower)
        above = self._gather(table, lower + 1)
        return below + fraction * (above - below)

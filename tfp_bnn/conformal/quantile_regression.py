"""`ConformalizedQuantileRegressor`: conformalized quantile regression (CQR).

Romano, Patterson and Candes (2019): a model's lower and upper quantile predictions
(q_lo, q_hi) on held-out calibration rows give the scores

    s_i = max(q_lo_i - y_i, y_i - q_hi_i)

(negative inside the band, the distance outside it), and with their conformal quantile Q
(`tfp_bnn.conformal.conformal_quantile`) a new point gets

    [q_lo - Q, q_hi + Q].

For a test row exchangeable with the n calibration rows, P(y in interval) >= 1 - alpha,
and <= 1 - alpha + 1 / (n + 1) for continuous scores (no ties), whatever the quantile
model: Q widens a band that covers too little and narrows one that covers too much. The
interval keeps the band's shape, so it adapts to the noise where the quantile model does.
Crossing quantiles (q_lo > q_hi) are allowed: the guarantee still holds, and an interval
may come out empty (lower > upper).

A Bayesian network's central 1 - alpha predictive interval (`RegressionPrediction.interval`)
is such a band: `from_prediction` conformalizes it.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.conformal import _split
from tfp_bnn.conformal.regression import one_output


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ConformalizedQuantileRegressor(_split.SplitConformal):
    """CQR: a quantile band [q_lo, q_hi] widened (or narrowed) to coverage >= 1 - alpha.

    Fitted on calibration rows the model never saw: for a test row exchangeable with
    them, [q_lo - Q, q_hi + Q] holds y with probability >= 1 - alpha, and at most
    1 - alpha + 1 / (n + 1) for continuous scores (no ties). With n < 1 / alpha - 1 rows
    every interval is (-inf, inf); `fit` warns.

    Args:
        alpha: the miscoverage level, in (0, 1): the intervals aim at 1 - alpha.

    Attributes:
        quantile: the fitted quantile Q (negative when the band covers more than needed;
            inf when n < 1 / alpha - 1).
        calibration_size: n.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(0, 1, size=2000)
    >>> y = x * rng.normal(size=2000)                  # noise sd x
    >>> lower, upper = -x, x                           # a band one sd wide: too narrow
    >>> cqr = tfp_bnn.conformal.ConformalizedQuantileRegressor(alpha=0.1)
    >>> cqr = cqr.fit(y[:1000], lower[:1000], upper[:1000])
    >>> test_lower, test_upper = cqr.predict_interval(lower[1000:], upper[1000:])
    >>> round(tfp_bnn.conformal.coverage(y[1000:], test_lower, test_upper), 2)   # the band: 0.68
    0.91
    """

    def _band(self, lower, upper):
        lower, upper = check.vector("lower", lower), check.vector("upper", upper)
        _split.matching_rows(lower=lower, upper=upper)
        return lower, upper

    def fit(self, y, lower, upper):
        """Calibrates on held-out rows: Q from the scores max(q_lo - y, y - q_hi).

        Args:
            y: calibration targets [n], finite.
            lower: the model's lower quantile predictions q_lo at those rows [n], finite
                (for 1 - alpha coverage, typically its alpha / 2 quantile).
            upper: its upper quantile predictions q_hi [n], finite (typically the
                1 - alpha / 2 quantile).

        Returns:
            self, fitted.
        """
        lower, upper = self._band(lower, upper)
        y = check.vector("y", y)
        _split.matching_rows(lower=lower, y=y)
        self._calibrate(np.maximum(lower - y, y - upper))
        return self

    def predict_interval(self, lower, upper):
        """The conformalized interval [q_lo - Q, q_hi + Q] of each new point.

        Args:
            lower: the model's lower quantile predictions [N], finite.
            upper: its upper quantile predictions [N], finite.

        Returns:
            (lower, upper), float64 arrays [N]; -inf and inf when Q is infinite.
        """
        quantile = self._fitted_quantile("predict_interval")
        lower, upper = self._band(lower, upper)
        return lower - quantile, upper + quantile

    @classmethod
    def from_prediction(cls, prediction, y, alpha=0.1):
        """CQR of a `RegressionPrediction`'s central 1 - alpha interval.

        The band is `prediction.interval(1 - alpha)`: the alpha / 2 and 1 - alpha / 2
        quantiles of the Monte Carlo predictive mixture, conformalized on the
        calibration rows.

        Args:
            prediction: `tfp_bnn.predict.regression(model, x_cal, ...)` for one output
                (mean of shape [n] or [n, 1]).
            y: the calibration targets [n].
            alpha: the miscoverage level, in (0, 1).

        Returns:
            A fitted `ConformalizedQuantileRegressor`; `interval` applies it to new
            predictions.

        Example:
        >>> rng = np.random.default_rng(0)
        >>> prediction = tfp_bnn.predict.RegressionPrediction(np.zeros((1, 500)),
        ...                                                   np.ones((1, 500)))
        >>> y = 2.0 * rng.normal(size=500)          # the model's sd of 1 is too small
        >>> cqr = tfp_bnn.conformal.ConformalizedQuantileRegressor.from_prediction(
        ...     prediction, y, alpha=0.1)
        >>> lower, upper = cqr.interval(prediction)
        >>> bool(cqr.quantile > 0 and np.all(upper > prediction.interval(0.9)[1]))
        True
        """
        result = cls(alpha=alpha)
        band = result._prediction_band(prediction)
        y = check.vector("y", y)
        _split.matching_rows(prediction=band[0], y=y)
        return result.fit(y, *band)

    def _prediction_band(self, prediction):
        one_output(prediction)
        lower, upper = prediction.interval(1.0 - self.alpha)
        return lower.reshape(-1), upper.reshape(-1)

    def interval(self, prediction):
        """`predict_interval` at the central 1 - alpha interval of a `RegressionPrediction`.

        Args:
            prediction: `tfp_bnn.predict.regression(model, x, ...)` for one output.

        Returns:
            (lower, upper), float64 arrays [N].
        """
        self._fitted_quantile("interval")
        return self.predict_interval(*self._prediction_band(prediction))

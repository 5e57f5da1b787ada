"""`SplitConformalRegressor`: intervals around a point prediction with a coverage guarantee.

Split conformal regression (Papadopoulos et al. 2002; Lei et al. 2018): held-out
calibration rows (y_i, mu_i[, sigma_i]) that the model was not trained on give the scores

    "absolute"     s_i = |y_i - mu_i|
    "normalized"   s_i = |y_i - mu_i| / sigma_i     (sigma: the predictive sd, > 0;
                                                     Papadopoulos, Gammerman and Vovk 2008)

and their conformal quantile Q (`tfp_bnn.conformal.conformal_quantile`); a new point gets

    [mu - Q, mu + Q]   or   [mu - Q sigma, mu + Q sigma].

For a test row exchangeable with the n calibration rows, P(y in interval) >= 1 - alpha,
and <= 1 - alpha + 1 / (n + 1) when the scores have no ties. The guarantee is marginal
(over the calibration set and the test point), not per x. The normalized score lets the
width follow the model's sigma (narrow where it is confident); a Bayesian network's
predictive sd, sqrt(RegressionPrediction.total_variance), is the natural sigma
(`from_prediction`).
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.conformal import _split
from tfp_bnn.predict.regression_prediction import RegressionPrediction

SCORES = ("absolute", "normalized")


def _positive_scale(name, scale):
    """`scale` as a 1-D finite float64 array of values > 0, or ValueError naming `name`."""
    scale = check.vector(name, scale)
    bad = scale <= 0
    if bad.any():
        raise ValueError(f"`{name}` must be > 0 (a predictive standard deviation), got "
                         f"{float(scale[bad][0])!r} at index {int(np.flatnonzero(bad)[0])}.")
    return scale


def one_output(prediction, name="prediction"):
    """(mean, stddev) [N] of a one-output `RegressionPrediction`, or ValueError naming `name`."""
    if not isinstance(prediction, RegressionPrediction):
        raise ValueError(f"`{name}` must be a tfp_bnn.predict.RegressionPrediction, got "
                         f"{type(prediction).__name__}.")
    shape = prediction.mean.shape
    if len(shape) > 1 and int(np.prod(shape[1:])) != 1:
        raise ValueError(
            f"`{name}` has {int(np.prod(shape[1:]))} outputs per point (mean shape {shape}); "
            "a conformal interval is for one output: fit one object per output column.")
    return prediction.mean.reshape(-1), prediction.stddev.reshape(-1)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class SplitConformalRegressor(_split.SplitConformal):
    """Split conformal intervals mu -/+ Q (or mu -/+ Q sigma) with coverage >= 1 - alpha.

    Fitted on calibration rows the model never saw: for a test row exchangeable with
    them, the interval holds y with probability >= 1 - alpha, and at most
    1 - alpha + 1 / (n + 1) for continuous scores (no ties), over the n calibration rows
    and the test point. With n < 1 / alpha - 1 rows every interval is (-inf, inf); `fit`
    warns.

    Args:
        alpha: the miscoverage level, in (0, 1): the intervals aim at 1 - alpha.
        score: "absolute", |y - mu| (Lei et al. 2018), or "normalized", |y - mu| / sigma
            with sigma the model's predictive standard deviation (Papadopoulos, Gammerman
            and Vovk 2008; Lei et al. 2018).

    Attributes:
        quantile: the fitted quantile Q (inf when n < 1 / alpha - 1).
        calibration_size: n.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-1, 1, size=2000)
    >>> y = x + rng.normal(size=2000)                 # the model predicts mu = x
    >>> conformal = tfp_bnn.conformal.SplitConformalRegressor(alpha=0.1)
    >>> conformal = conformal.fit(y[:1000], mean=x[:1000])
    >>> lower, upper = conformal.predict_interval(x[1000:])
    >>> round(tfp_bnn.conformal.coverage(y[1000:], lower, upper), 2)   # 0.9 on average
    0.89
    """

    def __init__(self, alpha=0.1, score="absolute"):
        super().__init__(alpha)
        self.score = check.one_of("score", score, SCORES)

    def _checked(self, y, mean, scale):
        """(y or None, mean, scale or None) checked against each other and the score."""
        mean = check.vector("mean", mean)
        if y is not None:
            y = check.vector("y", y)
            _split.matching_rows(mean=mean, y=y)
        if self.score == "absolute":
            if scale is not None:
                raise ValueError("`scale` is for score='normalized'; this regressor has "
                                 "score='absolute' (pass scale=None).")
            return y, mean, None
        if scale is None:
            raise ValueError("`scale` is required for score='normalized' (the predictive "
                             "standard deviation per row).")
        scale = _positive_scale("scale", scale)
        _split.matching_rows(mean=mean, scale=scale)
        return y, mean, scale

    def fit(self, y, mean, scale=None):
        """Calibrates on held-out rows: Q from their scores.

        Args:
            y: calibration targets [n], finite.
            mean: the model's point predictions at those rows [n], finite.
            scale: the model's predictive standard deviations [n], > 0, for
                score="normalized"; None for score="absolute".

        Returns:
            self, fitted.
        """
        y, mean, scale = self._checked(y, mean, scale)
        residual = np.abs(y - mean)
        self._calibrate(residual if scale is None else residual / scale)
        return self

    def predict_interval(self, mean, scale=None):
        """The conformal interval of each new point.

        Args:
            mean: the model's point predictions [N], finite.
            scale: their predictive standard deviations [N], > 0, for
                score="normalized"; None for score="absolute".

        Returns:
            (lower, upper), float64 arrays [N]: mean -/+ Q (times scale); -inf and inf
            when Q is infinite.
        """
        quantile = self._fitted_quantile("predict_interval")
        _, mean, scale = self._checked(None, mean, scale)
        half_width = np.full_like(mean, quantile) if scale is None else quantile * scale
        return mean - half_width, mean + half_width

    @classmethod
    def from_prediction(cls, prediction, y, alpha=0.1, score="normalized"):
        """A regressor fitted on a `RegressionPrediction` at the calibration inputs.

        mu is the predictive mean and sigma = sqrt(total_variance), the predictive sd of
        the Monte Carlo mixture (epistemic and aleatoric).

        Args:
            prediction: `tfp_bnn.predict.regression(model, x_cal, ...)` for one output
                (mean of shape [n] or [n, 1]).
            y: the calibration targets [n].
            alpha: the miscoverage level, in (0, 1).
            score: "normalized" (sigma from the prediction) or "absolute".

        Returns:
            A fitted `SplitConformalRegressor`; `interval` applies it to new predictions.

        Example:
        >>> rng = np.random.default_rng(0)
        >>> sd = rng.uniform(0.1, 2.0, size=(1, 500))          # per point, known
        >>> prediction = tfp_bnn.predict.RegressionPrediction(np.zeros((1, 500)), sd ** 2)
        >>> y = sd[0] * rng.normal(size=500)
        >>> conformal = tfp_bnn.conformal.SplitConformalRegressor.from_prediction(
        ...     prediction, y, alpha=0.1)
        >>> lower, upper = conformal.interval(prediction)
        >>> bool(np.all(np.isclose(upper, conformal.quantile * sd[0])))
        True
        """
        result = cls(alpha=alpha, score=score)
        mean, stddev = one_output(prediction)
        y = check.vector("y", y)
        _split.matching_rows(prediction=mean, y=y)
        return result.fit(y, mean, None if result.score == "absolute" else result._sigma(stddev))

    @staticmethod
    def _sigma(stddev):
        zero = stddev <= 0
        if zero.any():
            raise ValueError(
                f"`prediction` has a predictive standard deviation of 0 at row "
                f"{int(np.flatnonzero(zero)[0])}; score='normalized' divides by it (use "
                "score='absolute', or a prediction with noise or more samples).")
        return stddev

    def interval(self, prediction):
        """`predict_interval` at the mean (and sd) of a `RegressionPrediction`.

        Args:
            prediction: `tfp_bnn.predict.regression(model, x, ...)` for one output.

        Returns:
            (lower, upper), float64 arrays [N].
        """
        self._fitted_quantile("interval")
        mean, stddev = one_output(prediction)
        scale = None if self.score == "absolute" else self._sigma(stddev)
        return self.predict_interval(mean, scale)

    def get_config(self):
        return {**super().get_config(), "score": self.score}

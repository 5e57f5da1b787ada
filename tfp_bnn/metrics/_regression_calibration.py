"""Calibration of regression predictives through the probability integral transform (PIT).

A predictive CDF F_i is calibrated when its PIT values u_i = F_i(y_i) are uniform on [0, 1]:
then a fraction p of the targets lies below every predicted p-quantile. The error measures the
gap between p and that fraction over a grid of levels (Kuleshov et al. 2018):

    QCE = (1/m) sum_j |p_j - mean_i [u_i <= p_j]|^order,   order 1 or 2

Exported as `tfp_bnn.metrics.<name>`.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.predict.regression_prediction import RegressionPrediction

# The default levels p = 0.05, 0.10, ..., 0.95 (19 levels), each the correctly rounded j / 20.
_DEFAULT_LEVELS = np.arange(1, 20) / 20.0


def probability_integral_transform(prediction, y) -> np.ndarray:
    """The predictive CDF at each target, u = F(y), of a Gaussian-mixture predictive.

    The predictive of a `RegressionPrediction` is the equal mixture of its
    T Gaussians N(mu_t, sigma_t^2) per point and output, so

        u = (1/T) sum_t Phi((y - mu_t) / sigma_t)

    evaluated by the prediction's own mixture CDF (the one its `interval`
    and `coverage` use); a sample with zero variance is a step at its mean.
    For a calibrated predictive, u is uniform on [0, 1] (Dawid 1984;
    Gneiting et al. 2007); pass it to `quantile_calibration_error`.

    Args:
        prediction: a `tfp_bnn.predict.RegressionPrediction` (from
            `tfp_bnn.predict.regression`), or a `DistributionPrediction`
            whose output distributions are Normal.
        y: targets, shaped like `prediction.mean` ([N, D], or [N] for D = 1).

    Returns:
        A float64 array of PIT values in [0, 1], shaped like `prediction.mean`.

    Example:
    >>> prediction = tfp_bnn.predict.RegressionPrediction(np.zeros((1, 3)), np.ones((1, 3)))
    >>> probability_integral_transform(prediction, [0.0, 1.0, -1.0]).round(4)  # Phi(y), T = 1
    array([0.5   , 0.8413, 0.1587])
    """
    if not isinstance(prediction, RegressionPrediction):
        raise ValueError(
            "`prediction` must be a tfp_bnn.predict.RegressionPrediction (from "
            f"tfp_bnn.predict.regression), got {type(prediction).__name__}."
        )
    return prediction.cdf(y)


def quantile_calibration_error(pit, levels=None, order: int = 1) -> float:
    """Calibration error of a regression predictive from its PIT values.

    At each level p_j the predicted p_j-quantile should have a fraction p_j
    of the targets below it; it has phat_j = mean_i [u_i <= p_j], with u_i
    = F_i(y_i) the PIT values (`probability_integral_transform`). The error
    is the mean gap over the m levels:

        QCE = (1/m) sum_j |p_j - phat_j|^order

    `order=1` (the default) is the mean absolute gap, in the units of a
    coverage; `order=2` the mean squared gap, the calibration error of
    Kuleshov et al. 2018 (eq. 9) with equal weights w_j = 1/m. The default
    levels are 0.05, 0.10, ..., 0.95. Under a calibrated predictive phat_j
    deviates from p_j by sqrt(p_j (1 - p_j) / n) (one standard error), so
    errors of that size are noise, not miscalibration.

    Args:
        pit: PIT values in [0, 1], any non-empty shape (all entries are
            pooled, e.g. [N, D] for D outputs).
        levels: None (the 19 levels j / 20), or the quantile levels, a
            non-empty 1-D array of numbers in [0, 1].
        order: 1 (mean absolute gap) or 2 (mean squared gap).

    Returns:
        The calibration error, a float in [0, 1].

    Example:
    >>> pit = np.array([0.1, 0.3, 0.5, 0.7, 0.9])   # evenly spread: calibrated
    >>> round(quantile_calibration_error(pit, levels=[0.2, 0.6]), 4)   # |.2 - .2|, |.6 - .6|
    0.0
    >>> quantile_calibration_error(np.full(4, 0.5), levels=[0.25, 0.75])   # all at the median
    0.25
    >>> quantile_calibration_error(np.full(4, 0.5), levels=[0.25, 0.75], order=2)
    0.0625
    """
    order = check.one_of("order", order, (1, 2))
    pit = check.array("pit", pit)
    if pit.size == 0:
        raise ValueError(f"`pit` is empty (shape {pit.shape}).")
    pit = check.vector("pit", pit.reshape(-1))
    if pit.min() < 0.0 or pit.max() > 1.0:
        raise ValueError(f"`pit` must lie in [0, 1] (CDF values F(y)), got values from "
                         f"{float(pit.min())!r} to {float(pit.max())!r}.")
    if levels is None:
        levels = _DEFAULT_LEVELS
    else:
        levels = check.vector("levels", levels)
        if levels.min() < 0.0 or levels.max() > 1.0:
            raise ValueError(f"`levels` must lie in [0, 1], got values from "
                             f"{float(levels.min())!r} to {float(levels.max())!r}.")
    below = np.searchsorted(np.sort(pit), levels, side="right") / pit.size
    return float(np.mean(np.abs(levels - below) ** order))

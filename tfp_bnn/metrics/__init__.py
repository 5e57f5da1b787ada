"""Calibration, selective-prediction, diversity and out-of-distribution scores.

The NumPy functions score predictive probabilities held in memory (for
example the Monte Carlo average of a Bayesian network's softmax outputs):
they validate their inputs, compute in float64 and return Python floats.
The Keras metrics accumulate the same quantities batch by batch inside
compiled train and test steps:

    ECE   = sum_b (n_b / n) |acc_b - conf_b|     (Guo et al. 2017, eq. 3)
    NLL   = mean_i -log p_i[y_i]
    Brier = mean_i sum_k (p_ik - [y_i == k])^2  (Brier 1950, multi-class)
    classwise-ECE = (1/K) sum_k sum_b (n_bk / n) |freq_bk - conf_bk|  (Kull et al. 2019)

and, as NumPy functions only:

    ACE   = the ECE with equal-mass bins of the top-label confidence  (Nixon et al. 2019)
    AUROC = P(s_out > s_in) + P(s_out == s_in) / 2   (OOD inputs positive)
    AUPR  = sum_j (R_j - R_{j-1}) P_j                (average precision, OOD positive)
    FPR@95%TPR = FPR at the highest threshold whose TPR >= 0.95  (Liang et al. 2018)
    AURC  = (1/n) sum_k risk of the k most confident (Geifman et al. 2019)
    disagreement = mean over points and member pairs of [yhat_m != yhat_m']
    QCE   = (1/m) sum_j |p_j - mean_i [F_i(y_i) <= p_j]|^order  (Kuleshov et al. 2018)

QCE scores a regression predictive from its PIT values F_i(y_i), which
`probability_integral_transform` computes for a
`tfp_bnn.predict.RegressionPrediction`.

A streaming metric over a dataset equals the NumPy function over the
concatenated batches (up to float32 accumulation). Inside a compiled step
labels cannot be range-checked: a label outside [0, K) counts as a wrong
prediction with probability 0. Pass them in `weighted_metrics` for Keras to
apply sample weights.

For regression outputs [means, log variances] `MeanRMSE` scores the means
(see `tfp_bnn.regression_metrics`).
"""

from tfp_bnn.metrics._calibration_errors import ClasswiseCalibrationError
from tfp_bnn.metrics._calibration_errors import adaptive_calibration_error
from tfp_bnn.metrics._calibration_errors import classwise_calibration_error
from tfp_bnn.metrics._diversity import disagreement
from tfp_bnn.metrics._ood import aupr
from tfp_bnn.metrics._ood import fpr_at_95_tpr
from tfp_bnn.metrics._regression_calibration import probability_integral_transform
from tfp_bnn.metrics._regression_calibration import quantile_calibration_error
from tfp_bnn.metrics._scores import ReliabilityCurve
from tfp_bnn.metrics._scores import accuracy
from tfp_bnn.metrics._scores import auroc
from tfp_bnn.metrics._scores import brier_score
from tfp_bnn.metrics._scores import expected_calibration_error
from tfp_bnn.metrics._scores import negative_log_likelihood
from tfp_bnn.metrics._scores import reliability_curve
from tfp_bnn.metrics._selective import RiskCoverageCurve
from tfp_bnn.metrics._selective import aurc
from tfp_bnn.metrics._selective import risk_at_coverage
from tfp_bnn.metrics._selective import risk_coverage_curve
from tfp_bnn.metrics._streaming import BrierScore
from tfp_bnn.metrics._streaming import ExpectedCalibrationError
from tfp_bnn.metrics._streaming import NegativeLogLikelihood
from tfp_bnn.regression_metrics import MeanRMSE

__all__ = [
    "BrierScore",
    "ClasswiseCalibrationError",
    "ExpectedCalibrationError",
    "MeanRMSE",
    "NegativeLogLikelihood",
    "ReliabilityCurve",
    "RiskCoverageCurve",
    "accuracy",
    "adaptive_calibration_error",
    "aupr",
    "aurc",
    "auroc",
    "brier_score",
    "classwise_calibration_error",
    "disagreement",
    "expected_calibration_error",
    "fpr_at_95_tpr",
    "negative_log_likelihood",
    "probability_integral_transform",
    "quantile_calibration_error",
    "reliability_curve",
    "risk_at_coverage",
    "risk_coverage_curve",
]

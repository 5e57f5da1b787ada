"""Calibration and out-of-distribution scores for classifiers.

The NumPy functions score predictive probabilities held in memory (for
example the Monte Carlo average of a Bayesian network's softmax outputs):
they validate their inputs, compute in float64 and return Python floats.
The Keras metrics accumulate the same quantities batch by batch inside
compiled train and test steps:

    ECE   = sum_b (n_b / n) |acc_b - conf_b|     (Guo et al. 2017, eq. 3)
    NLL   = mean_i -log p_i[y_i]
    Brier = mean_i sum_k (p_ik - [y_i == k])^2  (Brier 1950, multi-class)

A streaming metric over a dataset equals the NumPy function over the
concatenated batches (up to float32 accumulation). Inside a compiled step
labels cannot be range-checked: a label outside [0, K) counts as a wrong
prediction with probability 0. Pass them in `weighted_metrics` for Keras to
apply sample weights.

For regression outputs [means, log variances] `MeanRMSE` scores the means
(see `tfp_bnn.regression_metrics`).
"""

from tfp_bnn.metrics._scores import ReliabilityCurve
from tfp_bnn.metrics._scores import accuracy
from tfp_bnn.metrics._scores import auroc
from tfp_bnn.metrics._scores import brier_score
from tfp_bnn.metrics._scores import expected_calibration_error
from tfp_bnn.metrics._scores import negative_log_likelihood
from tfp_bnn.metrics._scores import reliability_curve
from tfp_bnn.metrics._streaming import BrierScore
from tfp_bnn.metrics._streaming import ExpectedCalibrationError
from tfp_bnn.metrics._streaming import NegativeLogLikelihood
from tfp_bnn.regression_metrics import MeanRMSE

__all__ = [
    "BrierScore",
    "ExpectedCalibrationError",
    "MeanRMSE",
    "NegativeLogLikelihood",
    "ReliabilityCurve",
    "accuracy",
    "auroc",
    "brier_score",
    "expected_calibration_error",
    "negative_log_likelihood",
    "reliability_curve",
]

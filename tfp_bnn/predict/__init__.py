"""Monte Carlo prediction and uncertainty decomposition.

- `sample(model, x, T)`: the T sampled outputs, [T, N, ...].
- `regression(model, x, T)`: predictive mean, epistemic / aleatoric / total
  variance (Kendall and Gal 2017), log-likelihood (Gal and Ghahramani
  2016), RMSE, prediction intervals and their coverage.
- `distribution(model, x, T)`: for a model ending in a distribution layer
  (`tfp_bnn.layers.IndependentNormal`, ...): the same split for any family
  with a mean and a variance, and the exact log-likelihood.
- `classification(model, x, T)`: predictive probabilities, predictive
  entropy, expected entropy and mutual information; NLL, accuracy, Brier,
  ECE, OOD AUROC.

None of them calls the model T times from Python: the weight samples are
drawn inside traced calls, in chunks (see `tfp_bnn.predict.engine`).
"""

from tfp_bnn.predict.classification import ClassificationPrediction
from tfp_bnn.predict.classification import classification
from tfp_bnn.predict.distribution import DistributionPrediction
from tfp_bnn.predict.distribution import distribution
from tfp_bnn.predict.engine import MonteCarloRunner
from tfp_bnn.predict.regression_prediction import RegressionPrediction
from tfp_bnn.predict.regression import regression
from tfp_bnn.predict.sampling import sample

__all__ = [
    "ClassificationPrediction",
    "DistributionPrediction",
    "MonteCarloRunner",
    "RegressionPrediction",
    "classification",
    "distribution",
    "regression",
    "sample",
]

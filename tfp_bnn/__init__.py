"""tfp_bnn: Bayesian neural networks for Keras 3, built on TensorFlow Probability.

The objective, the same everywhere in the package:

    ELBO loss per example = mean NLL + kl_weight * KL(q || p),  kl_weight = 1/N

for N training examples.
"""

__version__ = "0.1.0"

# Before anything imports Keras layers: a clear ImportError on an unsupported backend.
from tfp_bnn import _backend

_backend.require_supported()

from tfp_bnn import calibration
from tfp_bnn import callbacks
from tfp_bnn import conformal
from tfp_bnn import data
from tfp_bnn import distributions
from tfp_bnn import ensembles
from tfp_bnn import export
from tfp_bnn import flows
from tfp_bnn import kernels
from tfp_bnn import laplace
from tfp_bnn import layers
from tfp_bnn import losses
from tfp_bnn import mc_dropout
from tfp_bnn import metrics
from tfp_bnn import moments
# matplotlib is imported inside the plotting functions, so these stay cheap.
from tfp_bnn import plots
from tfp_bnn import plots_nodes
from tfp_bnn import posteriors
from tfp_bnn import predict
from tfp_bnn import priors
from tfp_bnn import saving
from tfp_bnn.conversion import bayesianize
from tfp_bnn.modes import bayesian_layers
from tfp_bnn.modes import is_mean_mode
from tfp_bnn.modes import kl_layers
from tfp_bnn.modes import mean_mode
from tfp_bnn.modes import set_mean_mode
from tfp_bnn.saving import load_model
from tfp_bnn.saving import load_predictive

__all__ = [
    "bayesian_layers",
    "bayesianize",
    "calibration",
    "callbacks",
    "conformal",
    "data",
    "distributions",
    "ensembles",
    "export",
    "flows",
    "is_mean_mode",
    "kernels",
    "kl_layers",
    "laplace",
    "layers",
    "load_model",
    "load_predictive",
    "losses",
    "mc_dropout",
    "mean_mode",
    "metrics",
    "moments",
    "plots",
    "plots_nodes",
    "posteriors",
    "predict",
    "priors",
    "saving",
    "set_mean_mode",
]

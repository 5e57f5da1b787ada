"""Normalizing flows: bijectors that do the math, and the layer that owns them.

- `Planar`, `Radial`, `Sylvester`, `BatchNormFlow`: `tfp.bijectors.Bijector`
  subclasses on events of the last axis, parameters given as tensors.
- `NormalizingFlow`: the Keras layer owning the variables of a chain of them;
  `y, log_det = flow(z0, training=training)`.
- `FLOWS`: the step names `NormalizingFlow` accepts.

The flow posterior for weights is `tfp_bnn.posteriors.FlowPosterior`.
"""

from tfp_bnn.flows.batch_norm import BatchNormFlow
from tfp_bnn.flows.normalizing_flow import FLOWS
from tfp_bnn.flows.normalizing_flow import NormalizingFlow
from tfp_bnn.flows.planar import Planar
from tfp_bnn.flows.radial import Radial
from tfp_bnn.flows.sylvester import Sylvester

__all__ = [
    "BatchNormFlow",
    "FLOWS",
    "NormalizingFlow",
    "Planar",
    "Radial",
    "Sylvester",
]

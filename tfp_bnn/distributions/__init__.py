"""Distribution-valued outputs in Keras 3: the tensor that carries a distribution.

`tfp.layers.DistributionLambda` returns a `tfd.Distribution` disguised as a
tensor, which tf_keras passed to the loss untouched. Keras 3 passes tensors
between layers and converts whatever reaches a loss to a tensor, so tfp_bnn's
distribution layers (`tfp_bnn.layers.DistributionLambda`,
`IndependentNormal`, ...) return a real tensor -- TFP's
`convert_to_tensor_fn` of the distribution, a sample by default -- that
carries the distribution with it:

- `distribution_of(t)` returns it (also through the casts, reshapes and
  identities Keras applies to a model output before the loss sees it);
- the tensor forwards the distribution's methods (`log_prob`, `mean`,
  `stddev`, `sample`, ...), so TFP's loss `lambda y, rv_y: -rv_y.log_prob(y)`
  and `yhat = model(x); yhat.mean()` work unchanged.

The carried distribution lives as long as the tensor object: any later
operation (another layer, arithmetic) gives a plain tensor. A distribution
layer is therefore the last layer of a model, or is followed only by
`tfp_bnn.layers.KLDivergenceAddLoss`, which passes the distribution on.

On Keras' JAX backend the distributions are TFP's JAX substrate's. A JAX
array takes no attributes, so an eager call (`model(x)`) returns the
distribution itself (`value_of(output)` is its sample, or mean, ...), and
inside `fit`, `evaluate` and `predict` the output is the value, which
`distribution_of` and `NegativeLogLikelihood` find the distribution of.
The loss must receive the very array the layer returned: Keras passes it
unchanged when the layer's dtype is the loss' and the targets are shaped
like one sample (or one axis of size 1 less).
"""

from tfp_bnn.distributions import kl_registrations  # noqa: F401 (registers KLs with TFP)
from tfp_bnn.distributions.carrier import FORWARDED_METHODS
from tfp_bnn.distributions.carrier import attach
from tfp_bnn.distributions.carrier import carries_distribution
from tfp_bnn.distributions.carrier import distribution_of
from tfp_bnn.distributions.carrier import value_of
from tfp_bnn.distributions.negative_log_likelihood import NegativeLogLikelihood
from tfp_bnn.distributions.negative_log_likelihood import negative_log_likelihood

__all__ = [
    "FORWARDED_METHODS",
    "NegativeLogLikelihood",
    "attach",
    "carries_distribution",
    "distribution_of",
    "negative_log_likelihood",
    "value_of",
]

"""What the composite layers (attention, transformer block) share.

A composite layer owns no random weight itself: it builds tfp_bnn's
variational layers as sublayers, each with its own KL term, `kl_weight`
variable and `sampling` switch, so `KLScheduler`, `set_mean_mode` and
`tfp_bnn.predict` reach them through the tracked sublayers as they reach
any other variational layer. This module validates the arguments that are
passed through to the sublayers (with the messages `BayesianLayer` gives),
derives the sublayers' seeds and holds the training-only dropout.
"""

from keras import ops

from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn import posteriors as posteriors_lib
from tfp_bnn import priors as priors_lib
from tfp_bnn.layers.variational._variational_kl import check_kl_estimator
from tfp_bnn.layers.variational.dense_flipout import DenseFlipout
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization

# Which variational Dense class the projections and feed-forward layers use.
ESTIMATORS = {"reparameterization": DenseReparameterization, "flipout": DenseFlipout}

# Seeds a variational layer takes from its `seed` s: s, s + 1 (kernel loc,
# rho), s + 2, s + 3 (bias loc, rho). Sublayers are spaced this far apart.
SEED_STRIDE = 4


def dense_class(estimator):
    """The variational Dense class for `estimator`."""
    return ESTIMATORS[_validation.one_of("estimator", estimator, ESTIMATORS)]


def variational_arguments(estimator, posterior, prior, kl_weight, kl_estimator,
                          bayesian_bias, seed):
    """Validated sublayer arguments, checked before any sublayer exists.

    Returns a dict with the resolved posterior and prior objects (shared by
    every sublayer: they hold configuration, not state) and the rest as given.
    """
    dense = dense_class(estimator)
    posterior = posteriors_lib.get(posterior)
    prior = priors_lib.get(prior)
    if dense.requires_location_scale and not posterior.is_location_scale:
        raise ValueError(
            f"`estimator`={estimator!r} needs a location-scale `posterior` (e.g. "
            f"MeanFieldNormal), got {posterior!r}."
        )
    kl_weight = _validation.number("kl_weight", kl_weight, low=0.0, allow_none=True)
    check_kl_estimator(kl_estimator, prior)
    seed = _validation.seed(seed, allow_none=True)
    return {
        "posterior": posterior,
        "prior": prior,
        "kl_weight": kl_weight,
        "kl_estimator": kl_estimator,
        "bayesian_bias": bool(bayesian_bias),
        "seed": seed,
    }


def sub_seed(seed, index):
    """The seed of sublayer `index`: distinct from every other sublayer's."""
    return None if seed is None else seed + SEED_STRIDE * index


def dropout(inputs, rate, seed_generator, training):
    """Inverted dropout while training, the identity otherwise.

    Unlike `MCDropout` this one is off at inference: in the composite layers
    the weight posteriors carry the uncertainty, and dropout only
    regularises training (as in `keras.layers.MultiHeadAttention`).
    """
    if not training or rate == 0:
        return inputs
    uniform = noise.uniform(noise.shape_of(inputs), noise.next_seed(seed_generator))
    keep = ops.cast(uniform >= rate, inputs.dtype) / ops.cast(1.0 - rate, inputs.dtype)
    return inputs * keep


def set_variational_attributes(layer, variational):
    """Sets the checked `variational_arguments` on `layer`, named as BayesianLayer names them
    (so `tfp_bnn.layers.variational.base.variational_config` serializes them)."""
    layer.posterior = variational["posterior"]
    layer.prior = variational["prior"]
    layer._initial_kl_weight = variational["kl_weight"]
    layer.kl_estimator = variational["kl_estimator"]
    layer.bayesian_bias = variational["bayesian_bias"]
    layer.seed = variational["seed"]

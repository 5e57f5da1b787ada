"""What the composite layers (attention, transformer block) share.

A composite layer owns no random weight itself: it builds tfp_bnn's
variational layers as sublayers, each with its own KL term, `kl_weight`
variable and `sampling` switch, so `KLScheduler`, `set_mean_mode` and
`tfp_bnn.predict` reach them through `model._flatten_layers` as they reach
any other variational layer. This module validates the arguments that are
passed through to the sublayers (with the messages `BayesianLayer` gives),
derives the sublayers' seeds and holds the training-only dropout.
"""

import math
import numbers

import tensorflow as tf

from tfp_bnn import noise
from tfp_bnn import posteriors as posteriors_lib
from tfp_bnn import priors as priors_lib
from tfp_bnn.layers.base import KL_ESTIMATORS
from tfp_bnn.layers.dense_flipout import DenseFlipout
from tfp_bnn.layers.dense_reparameterization import DenseReparameterization

# Which variational Dense class the projections and feed-forward layers use.
ESTIMATORS = {"reparameterization": DenseReparameterization, "flipout": DenseFlipout}

# Seeds a variational layer takes from its `seed` s: s, s + 1 (kernel loc,
# rho), s + 2, s + 3 (bias loc, rho). Sublayers are spaced this far apart.
SEED_STRIDE = 4


def positive_int(name, value, allow_none=False):
    """`value` if it is a positive int (or None when allowed), else ValueError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return int(value)


def dropout_rate(name, value):
    """`value` as a float if it is a number in [0, 1), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
        math.isfinite(value) and 0 <= value < 1
    ):
        raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")
    return float(value)


def dense_class(estimator):
    """The variational Dense class for `estimator`."""
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"`estimator` must be one of {sorted(ESTIMATORS)}, got {estimator!r}."
        )
    return ESTIMATORS[estimator]


def variational_arguments(estimator, posterior, prior, kl_weight, kl_estimator,
                          bayesian_bias, seed):
    """Validated sublayer arguments, checked before any sublayer exists.

    Returns a dict with the resolved posterior and prior objects (shared by
    every sublayer: they hold configuration, not state) and the rest as given.
    """
    dense_class(estimator)
    posterior = posteriors_lib.get(posterior)
    prior = priors_lib.get(prior)
    if estimator == "flipout" and not posterior.is_location_scale:
        raise ValueError(
            f"`estimator`='flipout' needs a location-scale `posterior` (e.g. "
            f"MeanFieldNormal), got {posterior!r}."
        )
    if kl_weight is not None:
        kl_weight = float(kl_weight)
        if not math.isfinite(kl_weight) or kl_weight < 0:
            raise ValueError(
                f"`kl_weight` must be a finite number >= 0 or None, got {kl_weight!r}."
            )
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"`kl_estimator` must be one of {KL_ESTIMATORS}, got {kl_estimator!r}."
        )
    if kl_estimator == "analytic" and not prior.has_analytic_kl:
        raise ValueError(
            f"`kl_estimator`='analytic' needs a prior with a closed-form KL; {prior!r} has "
            "none. Use kl_estimator='mc' or 'auto'."
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0
    ):
        raise ValueError(f"`seed` must be a non-negative int or None, got {seed!r}.")
    return {
        "posterior": posterior,
        "prior": prior,
        "kl_weight": kl_weight,
        "kl_estimator": kl_estimator,
        "bayesian_bias": bool(bayesian_bias),
        "seed": None if seed is None else int(seed),
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
    uniform = noise.uniform(tf.shape(inputs), noise.next_seed(seed_generator))
    keep = tf.cast(uniform >= rate, inputs.dtype) / tf.cast(1.0 - rate, inputs.dtype)
    return inputs * keep


def set_variational_attributes(layer, variational):
    """Sets the checked `variational_arguments` on `layer`, named as BayesianLayer names them
    (so `tfp_bnn.layers.base.variational_config` serializes them)."""
    layer.posterior = variational["posterior"]
    layer.prior = variational["prior"]
    layer._initial_kl_weight = variational["kl_weight"]
    layer.kl_estimator = variational["kl_estimator"]
    layer.bayesian_bias = variational["bayesian_bias"]
    layer.seed = variational["seed"]

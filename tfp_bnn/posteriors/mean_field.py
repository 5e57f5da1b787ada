"""The mean-field Gaussian posterior, sigma = softplus(rho): the default."""

import functools
import math

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn import _variables
from tfp_bnn import noise
from tfp_bnn._substrate import tfd
from tfp_bnn.posteriors.base import NormalPosterior
from tfp_bnn.posteriors.base import PosteriorDraw
from tfp_bnn.posteriors.base import seeded_initializer
from tfp_bnn.priors import Prior

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _draw_terms(loc, rho, seed, dtype, prior, with_noise, scale_offset=0.0):
    """Mean-field terms of one call: scale, scale * eps, the closed-form KL and log q.

    softplus is computed once and shared by the noise and the KL. Without a
    prior (the Monte Carlo KL) the draw also returns log q of its own sample
    w = loc + scale * eps, in float32 from eps itself:

        log q(w) = sum(-eps^2 / 2 - log scale - log(2 pi) / 2).

    Evaluating N(loc, scale).log_prob(w) instead recovers eps as
    (w - loc) / scale, which cancels when scale << |loc| (w == loc in
    float32 for rho = -50, scale = 2e-22) and whose gradient divides by
    scale^2, which underflows: the rho gradient overflows to inf/NaN. Both forms
    have the same value and the same total derivative (-1 / scale) in exact
    arithmetic.
    """
    scale = ops.softplus(rho)
    if scale_offset:
        scale = scale + scale_offset
    perturbation = log_prob = None
    if with_noise:
        eps = noise.normal(noise.shape_of(loc), dtype, seed)
        perturbation = ops.cast(scale, dtype) * eps
        if prior is None:
            eps = ops.cast(eps, scale.dtype)
            # In float32 whatever the variables' dtype, as PosteriorDraw says.
            # (Weight shapes are static: the size is a Python int.)
            log_prob = ops.cast(ops.sum(-0.5 * ops.square(eps) - ops.log(scale))
                                - _HALF_LOG_2PI * ops.cast(math.prod(loc.shape), scale.dtype),
                                "float32")
    kl = None if prior is None else prior.kl_from_normal(loc, scale)
    return scale, perturbation, kl, log_prob


# The same terms as one XLA cluster (forward and the backward XLA derives),
# for TensorFlow graphs that are not XLA-compiled as a whole (never on JAX,
# where `noise.in_xla_context()` is always True).
@functools.cache
def _fused_draw_terms():
    """The compiled function, made at first use (TensorFlow loads then, not at import)."""
    return tf.function(_draw_terms, jit_compile=True, autograph=False)
# Weights per tensor from which the cluster is used. Below it, launching the
# cluster costs more than TensorFlow's op-by-op kernels do, and each new
# weight shape would pay an XLA compilation on top (benchmarks/draw_cluster.py:
# a k-k-1 DenseReparameterization train step on one thread, plain / cluster
# time 0.91-0.98 for k <= 128, 1.23 at k = 512, 1.46 at 1024).
FUSE_MIN_SIZE = 16384


def worth_fusing(shape) -> bool:
    """True if a weight tensor of `shape` has at least FUSE_MIN_SIZE values."""
    return math.prod(shape) >= FUSE_MIN_SIZE


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MeanFieldNormal(NormalPosterior):
    """Fully factorised Gaussian posterior, sigma = softplus(rho) (Blundell et al. 2015, sec. 3.2).

    Each weight has a mean `loc` and an unconstrained `rho`; the standard
    deviation softplus(rho) is positive for every real rho, so the optimiser
    works in an unconstrained space. A sample is w = loc + softplus(rho) * eps.

    Initialisation starts close to a point mass, as TFP's
    `default_mean_field_normal_fn` does: `loc` from the layer's
    `kernel_initializer` (`bias_initializer` for a Bayesian bias), and
    rho ~ N(rho_init, rho_init_stddev^2). The defaults (-3, 0.1) give
    sigma ~= softplus(-3) = 0.049, so early training sees a nearly
    deterministic network and the noise grows only where the data allow.

    With `scale_offset` the standard deviation is scale_offset + softplus(rho),
    bounded away from 0. TFP's `posterior_mean_field` (its regression
    tutorial) is scale = 1e-5 + softplus(c + t), c = log(e - 1), with zeros
    for t and the loc: `MeanFieldNormal(rho_init=math.log(math.e - 1),
    rho_init_stddev=0, scale_offset=1e-5)` with `kernel_initializer="zeros"`
    (rho = c + t has the same gradients as t).

    TFP's `default_mean_field_normal_fn` arguments map as follows: the
    `loc_*` ones are the layer's `kernel_initializer`, `kernel_regularizer`
    and `kernel_constraint` (`bias_*` for a Bayesian bias), `is_singular` is
    the layer's `bayesian_bias=False` (the default), and the three
    `untransformed_scale_*` ones act on rho, the untransformed scale, as in
    TFP. TFP's CIFAR-10 Bayesian ResNet and VGG start rho at N(-9, 0.1^2)
    and clip it to at most log(0.2) with a lambda; the serializable form is
    `MeanFieldNormal(untransformed_scale_initializer=keras.initializers.
    RandomNormal(-9.0, 0.1), untransformed_scale_constraint=
    tfp_bnn.posteriors.ClipValue(-1000.0, math.log(0.2)))`.

    Args:
        rho_init: mean of the initial rho values.
        rho_init_stddev: spread of the initial rho values, >= 0.
        scale_offset: added to softplus(rho), >= 0.
        untransformed_scale_initializer: a Keras initializer of rho (name,
            instance or config); None for N(rho_init, rho_init_stddev^2).
        untransformed_scale_regularizer: a Keras regularizer of rho, or None.
        untransformed_scale_constraint: a Keras constraint the optimizer
            applies to rho after each update, or None.

    Example:
    >>> posterior = MeanFieldNormal(rho_init=-3.0, rho_init_stddev=0.0)
    >>> layer = tfp_bnn.layers.DenseReparameterization(2, posterior=posterior, seed=0)
    >>> _ = layer(np.ones((1, 3), "float32"))
    >>> float(layer.kernel_posterior.stddev()[0, 0])   # softplus(-3)
    0.048587...
    """

    is_location_scale = True

    def __init__(self, rho_init=-3.0, rho_init_stddev=0.1, scale_offset=0.0,
                 untransformed_scale_initializer=None, untransformed_scale_regularizer=None,
                 untransformed_scale_constraint=None):
        super().__init__(rho_init, rho_init_stddev, scale_offset)
        self.untransformed_scale_initializer = check.initializer(
            "untransformed_scale_initializer", untransformed_scale_initializer, allow_none=True)
        self.untransformed_scale_regularizer = check.regularizer(
            "untransformed_scale_regularizer", untransformed_scale_regularizer)
        self.untransformed_scale_constraint = check.constraint(
            "untransformed_scale_constraint", untransformed_scale_constraint)

    def _rho_initializer(self, seed):
        if self.untransformed_scale_initializer is not None:
            return seeded_initializer(self.untransformed_scale_initializer, seed)
        return keras.initializers.RandomNormal(mean=self.rho_init, stddev=self.rho_init_stddev,
                                               seed=seed)

    def build(self, layer, name, shape, loc_initializer="glorot_uniform",
              regularizer=None, constraint=None, seed=None):
        loc = layer.add_weight(
            name=f"{name}_loc",
            shape=shape,
            initializer=seeded_initializer(loc_initializer, seed),
            regularizer=regularizer,
            constraint=constraint,
            trainable=True,
        )
        rho_seed = None if seed is None else int(seed) + 1
        rho = layer.add_weight(
            name=f"{name}_rho",
            shape=shape,
            initializer=self._rho_initializer(rho_seed),
            regularizer=self.untransformed_scale_regularizer,
            constraint=self.untransformed_scale_constraint,
            trainable=True,
        )
        return (loc, rho)

    def prepare(self, params):
        """(loc, scale) with scale = softplus(rho), computed once per call.

        Args:
            params: the variables `build` returned.

        Returns:
            (loc, scale), tensors in the weight shape.
        """
        loc, rho = params
        scale = ops.softplus(rho)
        if self.scale_offset:
            scale = scale + self.scale_offset
        return _variables.read(loc), scale

    def loc_scale(self, prepared):
        return prepared

    def distribution(self, prepared):
        loc, scale = prepared
        return tfd.Normal(loc=loc, scale=scale)

    def mean(self, prepared):
        return prepared[0]

    def sample(self, prepared, seed, dtype, noise_scale):
        loc, scale = prepared
        eps = noise.normal(tuple(loc.shape), dtype, seed)
        return ops.cast(loc, dtype) + ops.cast(scale, dtype) * (eps * noise_scale)

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        loc, scale = prepared
        eps = noise.normal((num_samples,) + tuple(loc.shape), dtype, seed)
        return ops.cast(loc, dtype) + ops.cast(scale, dtype) * (eps * noise_scale)

    def kl(self, prepared, prior):
        return prior.kl_from_normal(*prepared)

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        loc, rho = (_variables.read(p) for p in params)
        if seed is None:  # only valid without noise
            seed = noise.zero_seed()
        # Inside an XLA computation the plain ops fuse with the rest of the
        # model; outside it, compiling a large weight's terms as one cluster is
        # faster than TensorFlow's op-by-op kernels (FUSE_MIN_SIZE above).
        fused = not noise.in_xla_context() and worth_fusing(loc.shape)
        fn = _fused_draw_terms() if fused else _draw_terms
        # A prior with variables (its class overrides `build`) stays out of the
        # compiled function: tf.function would key its trace on the prior's
        # config and reuse one layer's captured prior variables for another.
        fused_prior = prior if prior is None or type(prior).build is Prior.build else None
        scale, perturbation, kl, log_prob = fn(loc, rho, seed, keras.backend.standardize_dtype(dtype),
                                               fused_prior, with_noise, self.scale_offset)
        if prior is not None and fused_prior is None:
            kl = prior.kl_from_normal(loc, scale)
        return PosteriorDraw((loc, scale), perturbation, kl, log_prob)

    def get_config(self):
        config = super().get_config()
        # Only the arguments given, so that configs saved before they existed read the same.
        for key, serialize, value in (
                ("untransformed_scale_initializer", keras.initializers.serialize,
                 self.untransformed_scale_initializer),
                ("untransformed_scale_regularizer", keras.regularizers.serialize,
                 self.untransformed_scale_regularizer),
                ("untransformed_scale_constraint", keras.constraints.serialize,
                 self.untransformed_scale_constraint)):
            if value is not None:
                config[key] = serialize(value)
        return config

"""Variational posteriors: small registered classes that own no state.

A posterior object is configuration. `build(layer, name, shape, ...)` creates
the variational parameters as weights of the layer that uses it and returns
them; the other methods turn those parameters into a TFP distribution, its
mean, or a reparameterised sample. The same posterior object can therefore
serve a kernel and a bias, or many layers.

The contract a layer relies on (`tfp_bnn.layers.BayesianLayer`); the base
class `Posterior` derives everything else (`draw`, `sample_n`) from these:

- `build(layer, name, shape, loc_initializer, regularizer, constraint, seed)`
  creates the parameters with `layer.add_weight(name=f"{name}_...")` and
  returns them as a tuple of variables (the layer takes gradients of the
  loss with respect to them; the loc initializer, regularizer and constraint
  are the layer's kernel or bias arguments).
- `prepare(params)`: tensors derived once per call (default: the params).
- `distribution(prepared)`: q as a TFP distribution, element-wise (batch
  shape = the weight shape) or one joint distribution whose event is the
  weight tensor; the Monte Carlo KL sums its `log_prob`.
- `mean(prepared)`: the posterior mean, in the weight shape (mean mode).
- `sample(prepared, seed, dtype, noise_scale)`: a reparameterised sample
  mean + noise_scale * (w - mean) in `dtype`, from the int32 seed pair `seed`
  (use stateless ops: `tf.random.stateless_normal(shape, seed, dtype=dtype)`).
- optionally `kl(prepared, prior)` (the closed-form KL, summed) and
  `is_location_scale = True` with `loc_scale(prepared)` for Flipout, local
  reparameterization and moment propagation.
- `get_config()`, and registration under your package, for `.keras` files
  that load with `safe_mode=True`.

Example, a Gaussian posterior with one learned scale per weight tensor
(tests/test_custom_posterior_prior.py runs this):

    @keras.saving.register_keras_serializable(package="my_project")
    class SharedScaleNormal(tfp_bnn.posteriors.Posterior):
        def __init__(self, rho_init=-3.0):
            self.rho_init = float(rho_init)

        def build(self, layer, name, shape, loc_initializer="glorot_uniform",
                  regularizer=None, constraint=None, seed=None):
            loc = layer.add_weight(name=f"{name}_loc", shape=shape,
                                   initializer=loc_initializer,
                                   regularizer=regularizer, constraint=constraint)
            rho = layer.add_weight(name=f"{name}_rho", shape=(),
                                   initializer=keras.initializers.Constant(self.rho_init))
            return (loc, rho)

        def prepare(self, params):
            return tf.convert_to_tensor(params[0]), tf.nn.softplus(params[1])

        def distribution(self, prepared):
            loc, scale = prepared
            return tfd.Normal(loc, scale * tf.ones_like(loc))

        def mean(self, prepared):
            return prepared[0]

        def sample(self, prepared, seed, dtype, noise_scale):
            loc, scale = (tf.cast(t, dtype) for t in prepared)
            eps = tf.random.stateless_normal(tf.shape(loc), seed, dtype=dtype)
            return loc + scale * eps * noise_scale

        def get_config(self):
            return {"rho_init": self.rho_init}
"""

import collections
import math

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.config_objects import resolve
from tfp_bnn import noise
from tfp_bnn.priors import Prior

tfd = tfp.distributions


def seeded_initializer(identifier, seed):
    """Returns the Keras initializer for `identifier`, seeded with `seed`.

    A random initializer given by name (or without a seed of its own) gets
    `seed`, so that a layer's `seed=` makes its initial weights reproducible.
    An initializer that already carries a seed is left as it is.
    """
    initializer = keras.initializers.get(identifier)
    if seed is None:
        return initializer
    config = initializer.get_config()
    if "seed" in config and config["seed"] is None:
        config["seed"] = int(seed)
        return type(initializer).from_config(config)
    return initializer


# log_prob: log q(mean + perturbation), summed, float32, when the posterior can
# compute it stably from its own noise (flows, and the mean-field Gaussian's
# Monte Carlo KL); the layer's Monte Carlo KL then uses it.
# prior: the prior of these weights, set by the layer (`BayesianLayer._draw`).
PosteriorDraw = collections.namedtuple(
    "PosteriorDraw", ["prepared", "perturbation", "kl", "log_prob", "prior"],
    defaults=(None, None)
)

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
    scale = tf.nn.softplus(rho)
    if scale_offset:
        scale = scale + scale_offset
    perturbation = log_prob = None
    if with_noise:
        eps = noise.normal(tf.shape(loc), dtype, seed)
        perturbation = tf.cast(scale, dtype) * eps
        if prior is None:
            eps = tf.cast(eps, scale.dtype)
            # In float32 whatever the variables' dtype, as PosteriorDraw says.
            log_prob = tf.cast(tf.reduce_sum(-0.5 * tf.square(eps) - tf.math.log(scale))
                               - _HALF_LOG_2PI * tf.cast(tf.size(eps), scale.dtype),
                               "float32")
    kl = None if prior is None else prior.kl_from_normal(loc, scale)
    return scale, perturbation, kl, log_prob


# The same terms as one XLA cluster (forward and the backward XLA derives),
# for graphs that are not XLA-compiled as a whole.
_fused_draw_terms = tf.function(_draw_terms, jit_compile=True, autograph=False)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Posterior(ConfigObject):
    """Base class of weight posteriors.

    `is_location_scale` says whether the posterior is w = loc + scale * eps
    with eps ~ N(0, I); Flipout and local reparameterization need that.
    """

    is_location_scale = False

    def build(self, layer, name, shape, loc_initializer="glorot_uniform",
              regularizer=None, constraint=None, seed=None):
        raise NotImplementedError

    def prepare(self, params):
        """Tensors derived from the parameters once per call (e.g. the scale)."""
        return params

    def distribution(self, prepared):
        """Element-wise distribution (batch shape = the weight shape)."""
        raise NotImplementedError

    def mean(self, prepared):
        raise NotImplementedError

    def sample(self, prepared, seed, dtype, noise_scale):
        """A reparameterised sample mean + noise_scale * (sample - mean)."""
        raise NotImplementedError

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        """`num_samples` independent samples stacked on a new leading axis."""
        seeds = tf.random.experimental.stateless_split(seed, num_samples)
        shape = tf.convert_to_tensor(self.mean(prepared)).shape
        return tf.map_fn(
            lambda s: self.sample(prepared, s, dtype, noise_scale),
            seeds,
            fn_output_signature=tf.TensorSpec(shape, dtype),
        )

    def kl(self, prepared, prior):
        """Sum of the element-wise KL(q || prior) in closed form."""
        raise NotImplementedError(
            f"{type(self).__name__} has no closed-form KL to {type(prior).__name__}."
        )

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        """Everything a layer needs from the posterior for one call.

        Args:
            params: the variables `build` returned.
            seed: an int32 seed pair (shape [2]) for the noise.
            dtype: the layer's compute dtype, for the perturbation.
            prior: a prior to take the closed-form KL to, or None.
            with_noise: False skips the perturbation (it is then None).

        Returns:
            `PosteriorDraw(prepared, perturbation, kl, log_prob)`: the
            prepared parameters, sample - mean in `dtype`, the summed KL
            (float32) or None, and log q of the sample (float32) or None.
        """
        prepared = self.prepare(params)
        perturbation = None
        if with_noise:
            one = tf.constant(1.0, dtype)
            sample = self.sample(prepared, seed, dtype, one)
            perturbation = sample - tf.cast(self.mean(prepared), dtype)
        kl = None if prior is None else self.kl(prepared, prior)
        return PosteriorDraw(prepared, perturbation, kl)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MeanFieldNormal(Posterior):
    """Fully factorised Gaussian posterior, sigma = softplus(rho) (seed 002, 3.2).

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

    Args:
        rho_init: mean of the initial rho values.
        rho_init_stddev: spread of the initial rho values, >= 0.
        scale_offset: added to softplus(rho), >= 0.
    """

    is_location_scale = True

    def __init__(self, rho_init=-3.0, rho_init_stddev=0.1, scale_offset=0.0):
        rho_init = float(rho_init)
        rho_init_stddev = float(rho_init_stddev)
        scale_offset = float(scale_offset)
        if not math.isfinite(rho_init):
            raise ValueError(f"`rho_init` must be a finite number, got {rho_init!r}.")
        if not math.isfinite(rho_init_stddev) or rho_init_stddev < 0:
            raise ValueError(
                f"`rho_init_stddev` must be a finite number >= 0, got {rho_init_stddev!r}."
            )
        if not math.isfinite(scale_offset) or scale_offset < 0:
            raise ValueError(
                f"`scale_offset` must be a finite number >= 0, got {scale_offset!r}."
            )
        self.scale_offset = scale_offset
        self.rho_init = rho_init
        self.rho_init_stddev = rho_init_stddev

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
            initializer=keras.initializers.RandomNormal(
                mean=self.rho_init, stddev=self.rho_init_stddev, seed=rho_seed
            ),
            trainable=True,
        )
        return (loc, rho)

    def prepare(self, params):
        """(loc, scale) with scale = softplus(rho), computed once per call."""
        loc, rho = params
        scale = tf.nn.softplus(rho)
        if self.scale_offset:
            scale = scale + self.scale_offset
        return tf.convert_to_tensor(loc), scale

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
        return tf.cast(loc, dtype) + tf.cast(scale, dtype) * (eps * noise_scale)

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        loc, scale = prepared
        eps = noise.normal((num_samples,) + tuple(loc.shape), dtype, seed)
        return tf.cast(loc, dtype) + tf.cast(scale, dtype) * (eps * noise_scale)

    def kl(self, prepared, prior):
        return prior.kl_from_normal(*prepared)

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        loc, rho = (tf.convert_to_tensor(p) for p in params)
        if seed is None:  # only valid without noise
            seed = tf.zeros([2], tf.int32)
        # Inside an XLA computation the plain ops fuse with the rest of the
        # model; outside it, compiling them as one cluster is faster than
        # TensorFlow's op-by-op kernels (benchmarks/train_step.py).
        fn = _draw_terms if noise.in_xla_context() else _fused_draw_terms
        # A prior with variables (its class overrides `build`) stays out of the
        # compiled function: tf.function would key its trace on the prior's
        # config and reuse one layer's captured prior variables for another.
        fused_prior = prior if prior is None or type(prior).build is Prior.build else None
        scale, perturbation, kl, log_prob = fn(loc, rho, seed, tf.as_dtype(dtype).name,
                                               fused_prior, with_noise, self.scale_offset)
        if prior is not None and fused_prior is None:
            kl = prior.kl_from_normal(loc, scale)
        return PosteriorDraw((loc, scale), perturbation, kl, log_prob)

    def get_config(self):
        return {"rho_init": self.rho_init, "rho_init_stddev": self.rho_init_stddev,
                "scale_offset": self.scale_offset}


# FlowPosterior and FullCovarianceNormal build on the classes above, so they
# are imported after them.
from tfp_bnn.flow_posterior import FlowPosterior  # noqa: E402
from tfp_bnn.full_covariance_posterior import FullCovarianceNormal  # noqa: E402

_POSTERIORS = {"mean_field_normal": MeanFieldNormal, "flow": FlowPosterior,
               "full_covariance_normal": FullCovarianceNormal}


def get(identifier):
    """Resolves `identifier` to a `Posterior`.

    Accepts a `Posterior`, `None` (the `MeanFieldNormal` default), a name
    from `{"mean_field_normal", "flow", "full_covariance_normal"}` (default
    arguments), or a serialized dict.
    """
    return resolve(identifier, Posterior, _POSTERIORS, "posterior", default=MeanFieldNormal)

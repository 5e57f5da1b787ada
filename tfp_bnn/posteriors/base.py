"""The `Posterior` contract every weight posterior implements, and its draw.

See `tfp_bnn.posteriors` for the contract and a worked example.
"""

import collections

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation as check
from tfp_bnn import noise
from tfp_bnn.config_objects import ConfigObject


def seeded_initializer(identifier, seed):
    """Returns the Keras initializer for `identifier`, seeded with `seed`.

    A random initializer given by name (or without a seed of its own) gets
    `seed`, so that a layer's `seed=` makes its initial weights reproducible.
    An initializer that already carries a seed is left as it is.

    Args:
        identifier: a Keras initializer, its name or config.
        seed: int or None (None leaves the initializer unseeded).

    Returns:
        A `keras.initializers.Initializer`.

    Example:
    >>> initializer = seeded_initializer("glorot_uniform", seed=3)
    >>> initializer.seed
    3
    >>> bool(np.all(initializer((2, 2)) == seeded_initializer("glorot_uniform", 3)((2, 2))))
    True
    """
    initializer = keras.initializers.get(identifier)
    if seed is None:
        return initializer
    config = initializer.get_config()
    if "seed" in config and config["seed"] is None:
        config["seed"] = int(seed)
        return type(initializer).from_config(config)
    return initializer


class PosteriorDraw(collections.namedtuple(
        "PosteriorDraw", ["prepared", "perturbation", "kl", "log_prob", "prior"],
        defaults=(None, None))):
    """What `Posterior.draw` returns for one layer call (a named tuple).

    Args:
        prepared: what `Posterior.prepare` returned.
        perturbation: sample - mean in the layer's compute dtype, or None
            (no noise).
        kl: the summed closed-form KL (float32), or None.
        log_prob: log q(mean + perturbation), summed, float32, when the
            posterior can compute it stably from its own noise (flows, and
            the mean-field Gaussian's Monte Carlo KL), else None; the
            layer's Monte Carlo KL then uses it.
        prior: the prior of these weights, set by the layer
            (`BayesianLayer._draw`), else None.

    Example:
    >>> posterior = tfp_bnn.posteriors.MeanFieldNormal()
    >>> params = posterior.build(keras.layers.Layer(), "kernel", (3, 2), seed=0)
    >>> draw = posterior.draw(params, tf.constant([1, 2]), "float32")
    >>> draw.perturbation.shape, draw.kl is None
    (TensorShape([3, 2]), True)
    """

    __slots__ = ()



@keras.saving.register_keras_serializable(package="tfp_bnn")
class Posterior(ConfigObject):
    """Base class of weight posteriors.

    `is_location_scale` says whether the posterior is w = loc + scale * eps
    with eps ~ N(0, I); Flipout and local reparameterization need that.
    Subclasses implement the contract the `tfp_bnn.posteriors` module
    docstring lays out (and shows with a complete custom posterior).

    Example:
    A layer uses a posterior like this (`MeanFieldNormal` here):

    >>> posterior = tfp_bnn.posteriors.MeanFieldNormal()
    >>> params = posterior.build(keras.layers.Layer(), "kernel", (3, 2), seed=0)
    >>> prepared = posterior.prepare(params)
    >>> posterior.distribution(prepared).batch_shape
    TensorShape([3, 2])
    >>> posterior.sample_n(prepared, 5, tf.constant([1, 2]), "float32", 1.0).shape
    TensorShape([5, 3, 2])
    """

    is_location_scale = False

    def build(self, layer, name, shape, loc_initializer="glorot_uniform",
              regularizer=None, constraint=None, seed=None):
        """Creates the variational parameters of one weight tensor on `layer`.

        Args:
            layer: the Keras layer that owns the parameters (`add_weight`).
            name: the weight's name ("kernel", "bias", ...); parameter names
                start with it.
            shape: the weight's shape.
            loc_initializer: initializer of the posterior mean (the layer's
                kernel or bias initializer).
            regularizer: regularizer of the posterior mean, or None.
            constraint: constraint on the posterior mean, or None.
            seed: int or None, seeds the initial values.

        Returns:
            A tuple of the created variables (`params`).
        """
        raise NotImplementedError

    def prepare(self, params):
        """Tensors derived from the parameters once per call (e.g. the scale).

        Args:
            params: the variables `build` returned.

        Returns:
            The prepared parameters (default: `params` unchanged).
        """
        return params

    def distribution(self, prepared):
        """Element-wise distribution (batch shape = the weight shape).

        Args:
            prepared: what `prepare` returned.

        Returns:
            A `tfd.Distribution` of the weights.
        """
        raise NotImplementedError

    def mean(self, prepared):
        """The posterior mean, used in mean mode.

        Args:
            prepared: what `prepare` returned.

        Returns:
            A tensor in the weight shape.
        """
        raise NotImplementedError

    def sample(self, prepared, seed, dtype, noise_scale):
        """A reparameterised sample mean + noise_scale * (sample - mean).

        Args:
            prepared: what `prepare` returned.
            seed: an int32 seed pair, shape [2] (stateless noise).
            dtype: the dtype of the sample.
            noise_scale: scalar multiplying the noise (0 gives the mean).

        Returns:
            A tensor in the weight shape and `dtype`.
        """
        raise NotImplementedError

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        """`num_samples` independent samples stacked on a new leading axis.

        Args:
            prepared: what `prepare` returned.
            num_samples: S, an int.
            seed: an int32 seed pair, shape [2].
            dtype: the dtype of the samples.
            noise_scale: scalar multiplying the noise (0 gives the mean).

        Returns:
            A tensor [num_samples, *weight shape] in `dtype`.
        """
        if _backend.is_jax():  # vmap over the S seeds
            return ops.vectorized_map(lambda s: self.sample(prepared, s, dtype, noise_scale),
                                      ops.stack(noise.split(seed, num_samples)))
        seeds = tf.random.experimental.stateless_split(seed, num_samples)
        shape = tf.convert_to_tensor(self.mean(prepared)).shape
        return tf.map_fn(
            lambda s: self.sample(prepared, s, dtype, noise_scale),
            seeds,
            fn_output_signature=tf.TensorSpec(shape, dtype),
        )

    def kl(self, prepared, prior):
        """Sum of the element-wise KL(q || prior) in closed form.

        Args:
            prepared: what `prepare` returned.
            prior: a `tfp_bnn.priors.Prior` of the same weights.

        Returns:
            A float32 scalar, the KL in nats.
        """
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
            one = ops.convert_to_tensor(1.0, dtype)
            sample = self.sample(prepared, seed, dtype, one)
            perturbation = sample - ops.cast(self.mean(prepared), dtype)
        kl = None if prior is None else self.kl(prepared, prior)
        return PosteriorDraw(prepared, perturbation, kl)


class NormalPosterior(Posterior):
    """A Gaussian posterior whose scale is scale_offset + softplus(rho).

    The arguments and config that `MeanFieldNormal` and `FullCovarianceNormal`
    share: rho starts at N(rho_init, rho_init_stddev^2).
    """

    def __init__(self, rho_init=-3.0, rho_init_stddev=0.1, scale_offset=0.0):
        self.rho_init = check.number("rho_init", rho_init)
        self.rho_init_stddev = check.number("rho_init_stddev", rho_init_stddev, low=0.0)
        self.scale_offset = check.number("scale_offset", scale_offset, low=0.0)

    def get_config(self):
        return {"rho_init": self.rho_init, "rho_init_stddev": self.rho_init_stddev,
                "scale_offset": self.scale_offset}

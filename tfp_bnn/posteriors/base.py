"""The `Posterior` contract every weight posterior implements, and its draw.

See `tfp_bnn.posteriors` for the contract and a worked example.
"""

import collections

import keras
import tensorflow as tf

from tfp_bnn import _validation as check
from tfp_bnn.config_objects import ConfigObject


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

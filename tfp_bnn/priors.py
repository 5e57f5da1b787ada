"""Weight priors: small registered classes that build TFP distributions.

A prior is a factory for an *element-wise* distribution with scalar
parameters: every weight of a tensor gets the same independent prior. Layers
sum element-wise log-densities or KL terms over the weight tensor, which
avoids materialising a prior parameter tensor the size of the kernel.
"""

import math

import keras
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.config_objects import resolve

tfd = tfp.distributions


def _check_positive(name, value):
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"`{name}` must be a finite number > 0, got {value!r}.")
    return value


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Prior(ConfigObject):
    """Base class of weight priors.

    Subclasses implement `element_distribution(dtype)` and `get_config()`.
    `has_analytic_kl` says whether TFP has a closed-form KL divergence from
    a Normal posterior to this prior.
    """

    has_analytic_kl = False

    def element_distribution(self, dtype="float32"):
        raise NotImplementedError

    def kl_from_normal(self, loc, scale):
        """Sum over elements of KL(N(loc, scale^2) || p), in closed form."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form KL.")

    def distribution(self, shape, dtype="float32"):
        """The prior over a whole weight tensor of `shape` (for inspection)."""
        return tfd.Sample(
            self.element_distribution(dtype), sample_shape=tuple(shape)
        )



@keras.saving.register_keras_serializable(package="tfp_bnn")
class NormalPrior(Prior):
    """Independent Gaussian prior N(loc, scale^2) on every weight.

    The default N(0, 1) is TFP's default prior for its variational layers.

    Args:
        loc: mean of the prior.
        scale: standard deviation, > 0.
    """

    has_analytic_kl = True

    def __init__(self, loc=0.0, scale=1.0):
        loc = float(loc)
        if not math.isfinite(loc):
            raise ValueError(f"`loc` must be a finite number, got {loc!r}.")
        self.loc = loc
        self.scale = _check_positive("scale", scale)

    def element_distribution(self, dtype="float32"):
        return tfd.Normal(
            loc=tf.constant(self.loc, dtype), scale=tf.constant(self.scale, dtype)
        )

    def kl_from_normal(self, loc, scale):
        # seed 003, eq. (1); the same value as tfd.kl_divergence between the
        # two Normals, with fewer element-wise passes over the weights.
        s0 = tf.cast(self.scale, scale.dtype)
        m0 = tf.cast(self.loc, loc.dtype)
        ratio = tf.square(scale / s0) + tf.square((loc - m0) / s0)
        return 0.5 * tf.reduce_sum(ratio - 1.0) - tf.reduce_sum(tf.math.log(scale / s0))

    def get_config(self):
        return {"loc": self.loc, "scale": self.scale}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ScaleMixturePrior(Prior):
    """Scale mixture of two zero-mean Gaussians (Blundell et al. 2015, eq. 7).

    p(w) = pi * N(w | 0, sigma1^2) + (1 - pi) * N(w | 0, sigma2^2), with
    sigma1 > sigma2 so that the first component is the wide one and the
    second concentrates many weights near zero. There is no closed-form KL
    from a Gaussian posterior to this prior, so layers use the Monte Carlo
    estimate log q(w) - log p(w) at the sampled weights (seed 002, step 4).

    Args:
        pi: weight of the wide component, in (0, 1).
        sigma1: scale of the wide component, > sigma2.
        sigma2: scale of the narrow component, > 0.
    """

    has_analytic_kl = False

    def __init__(self, pi=0.5, sigma1=1.0, sigma2=math.exp(-6.0)):
        pi = float(pi)
        if not (0.0 < pi < 1.0):
            raise ValueError(f"`pi` must lie in the open interval (0, 1), got {pi!r}.")
        sigma1 = _check_positive("sigma1", sigma1)
        sigma2 = _check_positive("sigma2", sigma2)
        if sigma1 <= sigma2:
            raise ValueError(
                "`sigma1` must be larger than `sigma2` (sigma1 is the wide "
                f"component), got sigma1={sigma1!r}, sigma2={sigma2!r}."
            )
        self.pi = pi
        self.sigma1 = sigma1
        self.sigma2 = sigma2

    def element_distribution(self, dtype="float32"):
        return tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(
                probs=tf.constant([self.pi, 1.0 - self.pi], dtype)
            ),
            components_distribution=tfd.Normal(
                loc=tf.zeros([2], dtype),
                scale=tf.constant([self.sigma1, self.sigma2], dtype),
            ),
        )

    def get_config(self):
        return {"pi": self.pi, "sigma1": self.sigma1, "sigma2": self.sigma2}


_PRIORS = {"normal": NormalPrior, "scale_mixture": ScaleMixturePrior}


def get(identifier):
    """Resolves `identifier` to a `Prior`.

    Accepts a `Prior`, `None` (the N(0, 1) default), a name from
    `{"normal", "scale_mixture"}` (default arguments), or a serialized dict.
    """
    return resolve(identifier, Prior, _PRIORS, "prior", default=NormalPrior)

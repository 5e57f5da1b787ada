"""Weight priors: small registered classes that build TFP distributions.

A prior is configuration. Most are an *element-wise* distribution with scalar
parameters: layers sum element-wise log-densities or KL terms over the weight
tensor, never materialising a prior parameter tensor the size of the kernel.

The contract a layer relies on (`tfp_bnn.layers.BayesianLayer`):

- `build(layer, name, shape)` returns the prior of one weight tensor of
  `shape`. A prior without variables returns itself (the default). A prior
  with variables (e.g. `TrainableNormalPrior`) creates them with
  `layer.add_weight(name=f"{name}_...")` (trained by `fit`, saved with the
  model) and returns a copy of itself that holds them.
- `element_distribution(dtype)`: a TFP distribution whose `log_prob` of a
  weight tensor broadcasts element-wise (batch shape () or the weight shape).
- `has_analytic_kl` and `kl_from_normal(loc, scale)`: the closed-form KL
  from a Normal posterior, summed, when there is one; layers fall back on the
  Monte Carlo estimate log q(w) - log p(w) otherwise.
- `get_config()`, and registration under your package, for `.keras` files
  that load with `safe_mode=True`.

Example, a prior of your own with one learned scale per weight tensor
(tests/integration/test_custom_posterior_prior.py runs this):

    @keras.saving.register_keras_serializable(package="my_project")
    class LearnedLaplacePrior(tfp_bnn.priors.Prior):
        # Laplace(0, b) on every weight, b = softplus(rho) learned per tensor.

        def __init__(self, scale=1.0):
            self.scale = float(scale)
            self.rho = None  # set on the copy that `build` returns

        def build(self, layer, name, shape):
            built = LearnedLaplacePrior(self.scale)
            built.rho = layer.add_weight(
                name=f"{name}_rho", shape=(),
                initializer=keras.initializers.Constant(np.log(np.expm1(self.scale))))
            return built

        def element_distribution(self, dtype="float32"):
            scale = tf.cast(tf.nn.softplus(self.rho), dtype)
            return tfd.Laplace(tf.zeros([], dtype), scale)

        def get_config(self):
            return {"scale": self.scale}
"""

import math

import keras
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn import _variables
from tfp_bnn._substrate import tfd
from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.config_objects import resolve


def _normal_kl(loc, scale, prior_loc, prior_scale):
    """Sum over elements of KL(N(loc, scale^2) || N(prior_loc, prior_scale^2)).

    The closed form for diagonal Gaussians; the same value as tfd.kl_divergence between the two
    Normals, with fewer element-wise passes over the weights. The prior's
    parameters broadcast against the weights (scalars or weight-shaped).
    """
    s0 = ops.cast(prior_scale, scale.dtype)
    m0 = ops.cast(prior_loc, loc.dtype)
    ratio = ops.square(scale / s0) + ops.square((loc - m0) / s0)
    log_ratio = ops.log(scale / s0)
    if log_ratio.shape != ratio.shape:  # e.g. one scale for a whole tensor
        log_ratio = ops.broadcast_to(log_ratio, ratio.shape)
    # One sum of the per-weight KLs (each >= 0): XLA makes the terms and the
    # sum one pass over the weights, where two sums took two more.
    return ops.sum(0.5 * (ratio - 1.0) - log_ratio)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Prior(ConfigObject):
    """Base class of weight priors (the contract is in the module docstring).

    Subclasses implement `element_distribution(dtype)` and `get_config()`;
    a prior with variables also implements `build`. `has_analytic_kl` says
    whether there is a closed-form KL divergence from a Normal posterior to
    this prior (`kl_from_normal`).

    Example:
    >>> prior = tfp_bnn.priors.NormalPrior(scale=2.0)
    >>> prior.build(keras.layers.Layer(), "kernel", (3, 2)) is prior   # no variables
    True
    >>> prior.distribution((3, 2)).event_shape
    TensorShape([3, 2])
    """

    has_analytic_kl = False

    def build(self, layer, name, shape):
        """The prior of one weight tensor of `shape` in `layer`.

        A prior with variables creates them with `layer.add_weight` (names
        starting with `name`) and returns a copy of itself holding them; this
        default, for priors without variables, returns the prior itself.

        Args:
            layer: the Keras layer whose weight the prior is of.
            name: the weight's name, the prefix of the prior's variables.
            shape: the weight's shape.

        Returns:
            The `Prior` to use for that weight.
        """
        del layer, name, shape
        return self

    def element_distribution(self, dtype="float32"):
        raise NotImplementedError

    def kl_from_normal(self, loc, scale):
        """Sum over elements of KL(N(loc, scale^2) || p), in closed form.

        Args:
            loc: posterior means, in the weight shape.
            scale: posterior standard deviations, in the weight shape.

        Returns:
            A scalar tensor, the KL in nats.
        """
        raise NotImplementedError(f"{type(self).__name__} has no closed-form KL.")

    def distribution(self, shape, dtype="float32"):
        """The prior over a whole weight tensor of `shape` (for inspection).

        Args:
            shape: the weight's shape.
            dtype: the distribution's dtype.

        Returns:
            A `tfd.Distribution` whose event shape is `shape`.
        """
        element = self.element_distribution(dtype)
        rank = len(element.batch_shape)
        if rank:  # per-weight parameters: the batch already has the weight shape
            return tfd.Independent(element, reinterpreted_batch_ndims=rank)
        return tfd.Sample(element, sample_shape=tuple(shape))


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NormalPrior(Prior):
    """Independent Gaussian prior N(loc, scale^2) on every weight.

    The default N(0, 1) is TFP's default prior for its variational layers.

    Args:
        loc: mean of the prior.
        scale: standard deviation, > 0.

    Example:
    >>> prior = NormalPrior(scale=2.0)
    >>> float(prior.kl_from_normal(tf.zeros(4), tf.fill([4], 2.0)))   # q = p
    0.0
    """

    has_analytic_kl = True

    def __init__(self, loc=0.0, scale=1.0):
        self.loc = check.number("loc", loc)
        self.scale = check.positive("scale", scale)

    def element_distribution(self, dtype="float32"):
        return tfd.Normal(
            loc=ops.convert_to_tensor(self.loc, dtype),
            scale=ops.convert_to_tensor(self.scale, dtype),
        )

    def kl_from_normal(self, loc, scale):
        return _normal_kl(loc, scale, self.loc, self.scale)

    def get_config(self):
        return {"loc": self.loc, "scale": self.scale}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ScaleMixturePrior(Prior):
    """Scale mixture of two zero-mean Gaussians (Blundell et al. 2015, eq. 7).

    p(w) = pi * N(w | 0, sigma1^2) + (1 - pi) * N(w | 0, sigma2^2), with
    sigma1 > sigma2 so that the first component is the wide one and the
    second concentrates many weights near zero. There is no closed-form KL
    from a Gaussian posterior to this prior, so layers use the Monte Carlo
    estimate log q(w) - log p(w) at the sampled weights (Blundell et al. 2015, sec. 3.2).

    Args:
        pi: weight of the wide component, in (0, 1).
        sigma1: scale of the wide component, > sigma2.
        sigma2: scale of the narrow component, > 0.

    Example:
    >>> prior = ScaleMixturePrior(pi=0.25, sigma1=1.0, sigma2=0.01)
    >>> prior.has_analytic_kl   # the layers take the Monte Carlo KL
    False
    """

    has_analytic_kl = False

    def __init__(self, pi=0.5, sigma1=1.0, sigma2=math.exp(-6.0)):
        pi = check.number("pi", pi, low=0.0, high=1.0, low_open=True, high_open=True)
        sigma1 = check.positive("sigma1", sigma1)
        sigma2 = check.positive("sigma2", sigma2)
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
                probs=ops.convert_to_tensor([self.pi, 1.0 - self.pi], dtype)
            ),
            components_distribution=tfd.Normal(
                loc=ops.zeros([2], dtype),
                scale=ops.convert_to_tensor([self.sigma1, self.sigma2], dtype),
            ),
        )

    def get_config(self):
        return {"pi": self.pi, "sigma1": self.sigma1, "sigma2": self.sigma2}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class TrainableNormalPrior(Prior):
    """Gaussian prior N(loc, scale^2) whose parameters are learned (empirical Bayes).

    `build` adds the prior's variables to the layer that uses it: `loc`
    (`<name>_loc`) and, with `trainable_scale`, an unconstrained `rho`
    (`<name>_rho`, scale = softplus(rho)), one per weight (`per_weight`) or
    one scalar each for the whole tensor. They train with `fit` like the
    posterior's parameters: the KL(q || p_phi) in the loss has a gradient to
    phi, and they are saved with the model.

    `TrainableNormalPrior()` is TFP's `prior_trainable` from its regression
    tutorial: a per-weight loc initialised at 0 and the scale fixed at 1.

    Args:
        loc_initializer: Keras initializer of `loc` (name, instance or config).
        scale: the fixed scale, or the initial one with `trainable_scale`; > 0.
        trainable_scale: learn the scale too.
        per_weight: one loc (and scale) per weight; False for one per tensor.

    Example:
    >>> layer = tfp_bnn.layers.DenseVariational(
    ...     8, prior=TrainableNormalPrior(trainable_scale=True), kl_weight=1 / 1000)
    >>> _ = layer(np.ones((1, 3), "float32"))
    >>> len(layer.trainable_weights)   # posterior loc and rho, prior loc and scale
    4
    """

    has_analytic_kl = True

    def __init__(self, loc_initializer="zeros", scale=1.0, trainable_scale=False,
                 per_weight=True):
        try:
            self.loc_initializer = keras.initializers.get(loc_initializer)
        except (ValueError, TypeError):
            raise ValueError(
                f"`loc_initializer` must be a Keras initializer, got {loc_initializer!r}."
            ) from None
        self.scale = check.positive("scale", scale)
        self.trainable_scale = check.boolean("trainable_scale", trainable_scale)
        self.per_weight = check.boolean("per_weight", per_weight)
        self.variables = None  # (loc, rho or None) on the copy `build` returns

    def build(self, layer, name, shape):
        built = TrainableNormalPrior(**self.get_config())
        shape = tuple(shape) if self.per_weight else ()
        loc = layer.add_weight(name=f"{name}_loc", shape=shape,
                               initializer=self.loc_initializer, trainable=True)
        rho = None
        if self.trainable_scale:
            rho = layer.add_weight(
                name=f"{name}_rho", shape=shape, trainable=True,
                initializer=keras.initializers.Constant(math.log(math.expm1(self.scale))),
            )
        built.variables = (loc, rho)
        return built

    def loc_scale(self, dtype="float32"):
        """The prior's (loc, scale) tensors: scalars or weight-shaped.

        Args:
            dtype: the tensors' dtype.

        Returns:
            (loc, scale) of the built prior.
        """
        if self.variables is None:
            raise ValueError(
                "TrainableNormalPrior has no variables yet: use the prior that "
                "`build(layer, name, shape)` returns (a built layer's prior)."
            )
        loc, rho = self.variables
        loc = ops.cast(_variables.read(loc), dtype)
        scale = ops.convert_to_tensor(self.scale, dtype) if rho is None else ops.cast(
            ops.softplus(_variables.read(rho)), dtype)
        return loc, scale

    def element_distribution(self, dtype="float32"):
        return tfd.Normal(*self.loc_scale(dtype))

    def kl_from_normal(self, loc, scale):
        return _normal_kl(loc, scale, *self.loc_scale(loc.dtype))

    def get_config(self):
        return {
            "loc_initializer": keras.initializers.serialize(self.loc_initializer),
            "scale": self.scale,
            "trainable_scale": self.trainable_scale,
            "per_weight": self.per_weight,
        }


@keras.saving.register_keras_serializable(package="tfp_bnn")
class CenteredNormalPrior(Prior):
    """Fixed Gaussian prior N(w0, scale^2) centred on given weights w0 (MOPED).

    The empirical-Bayes prior of Krishnan, Subedar and Tickoo (2020, AAAI),
    "Specifying weight priors in Bayesian deep neural networks with empirical
    Bayes": the prior mean of every weight is its value in a trained
    deterministic network. `build` adds the centre w0 to the layer as a
    non-trainable per-weight `<name>_loc` (zeros until assigned; see
    `tfp_bnn.bayesianize`), so it is saved with the weights, not in the
    config, and the KL pulls the posterior towards it without moving it.

    Args:
        scale: the prior standard deviation, the same for every weight; > 0.

    Example:
    >>> prior = CenteredNormalPrior(scale=0.5).build(keras.layers.Layer(), "kernel", (2,))
    >>> _ = prior.loc.assign([1.0, -1.0])   # the trained weights w0
    >>> prior.distribution((2,)).mean().numpy()
    array([ 1., -1.], dtype=float32)
    """

    has_analytic_kl = True

    def __init__(self, scale=1.0):
        self.scale = check.positive("scale", scale)
        self.loc = None  # the centre variable, on the copy `build` returns

    def build(self, layer, name, shape):
        built = CenteredNormalPrior(self.scale)
        built.loc = layer.add_weight(name=f"{name}_loc", shape=tuple(shape),
                                     initializer="zeros", trainable=False)
        return built

    def _centre(self, dtype):
        if self.loc is None:
            raise ValueError("CenteredNormalPrior has no centre yet: use the prior that "
                             "`build(layer, name, shape)` returns (a built layer's prior).")
        return ops.cast(_variables.read(self.loc), dtype)

    def element_distribution(self, dtype="float32"):
        return tfd.Normal(self._centre(dtype), ops.convert_to_tensor(self.scale, dtype))

    def kl_from_normal(self, loc, scale):
        return _normal_kl(loc, scale, self._centre(loc.dtype), self.scale)

    def get_config(self):
        return {"scale": self.scale}


_PRIORS = {"normal": NormalPrior, "scale_mixture": ScaleMixturePrior,
           "trainable_normal": TrainableNormalPrior}


def get(identifier):
    """Resolves `identifier` to a `Prior`.

    Accepts a `Prior`, `None` (the N(0, 1) default), a name from
    `{"normal", "scale_mixture", "trainable_normal"}` (default arguments), or
    a serialized dict.

    Args:
        identifier: a `Prior`, None, one of those names, or the dict
            `keras.saving.serialize_keras_object` made of a prior.

    Returns:
        A `Prior`.

    Example:
    >>> get(None)
    NormalPrior(loc=0.0, scale=1.0)
    >>> get("scale_mixture").pi
    0.5
    """
    return resolve(identifier, Prior, _PRIORS, "prior", default=NormalPrior)

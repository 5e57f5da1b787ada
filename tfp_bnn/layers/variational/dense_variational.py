"""Dense layer with one posterior over [kernel, bias]: TFP's `DenseVariational`."""

import math

import keras
from keras import ops

from tfp_bnn import posteriors as posteriors_lib
from tfp_bnn import priors as priors_lib
from tfp_bnn._tfp_names import builder_advice
from tfp_bnn._tfp_names import kl_estimator_with_tfp_alias
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers.variational._dense_base import BayesianDenseBase

# Arguments of other tfp_bnn layers that this one replaces.
_REPLACED = {
    "bayesian_bias": "the bias is always in the posterior with the kernel when use_bias=True",
}
# TFP's builder functions, read by `builder_advice` for what to pass instead.
_BUILDERS = {"make_posterior_fn": "posterior", "make_prior_fn": "prior"}


class _Joint:
    """The flattened [kernel, bias] vector: splits it and composes the Dense arguments."""

    def __init__(self, layer, kernel_shape):
        self.kernel_shape = tuple(kernel_shape)
        self.kernel_size = math.prod(kernel_shape)
        self.units = kernel_shape[-1]
        self.use_bias = layer.use_bias
        self.size = self.kernel_size + (self.units if self.use_bias else 0)

    def split(self, w):
        """[..., size] -> kernels [..., in, units] and biases [..., units] (or None)."""
        lead = tuple(ops.shape(w)[:-1])
        kernel = ops.reshape(w[..., :self.kernel_size], lead + self.kernel_shape)
        return kernel, (w[..., self.kernel_size:] if self.use_bias else None)

    def join(self, kernel, bias):
        parts = [ops.reshape(kernel, [-1])]
        if self.use_bias:
            parts.append(ops.reshape(bias, [-1]))
        return ops.concatenate(parts, axis=0)

    def initializer(self, kernel_initializer, bias_initializer, seed):
        return _JointInitializer(self, posteriors_lib.seeded_initializer(kernel_initializer, seed),
                                 posteriors_lib.seeded_initializer(
                                     bias_initializer, None if seed is None else seed + 2))

    def regularizer(self, kernel_regularizer, bias_regularizer):
        if kernel_regularizer is None and (bias_regularizer is None or not self.use_bias):
            return None

        def regularize(w):
            kernel, bias = self.split(w)
            penalty = 0.0
            if kernel_regularizer is not None:
                penalty += kernel_regularizer(kernel)
            if bias is not None and bias_regularizer is not None:
                penalty += bias_regularizer(bias)
            return penalty
        return regularize

    def constraint(self, kernel_constraint, bias_constraint):
        if kernel_constraint is None and (bias_constraint is None or not self.use_bias):
            return None

        def constrain(w):
            kernel, bias = self.split(w)
            if kernel_constraint is not None:
                kernel = kernel_constraint(kernel)
            if bias is not None and bias_constraint is not None:
                bias = bias_constraint(bias)
            return self.join(kernel, bias)
        return constrain


class _JointInitializer(keras.initializers.Initializer):
    """The kernel and bias initializers, each on its part of w (not saved: only the values are)."""

    def __init__(self, joint, kernel_initializer, bias_initializer):
        self.joint = joint
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer

    def __call__(self, shape, dtype=None):
        joint = self.joint
        bias = self.bias_initializer((joint.units,), dtype) if joint.use_bias else None
        return joint.join(self.kernel_initializer(joint.kernel_shape, dtype), bias)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseVariational(BayesianDenseBase):
    """Dense layer with one variational posterior over its kernel and bias together.

    Keras 3 counterpart of TFP's `tfp.layers.DenseVariational` (tf_keras only),
    with the posterior and prior given as tfp_bnn objects instead of functions
    that build tf_keras models. The D = in * units (+ units) weights are one
    vector w = [flatten(kernel), bias] with one posterior q(w) and one prior
    p(w), so a `FullCovarianceNormal` posterior correlates kernel and bias.
    Each call draws one w ~ q (reparameterized) that the whole batch shares,
    computes `activation(inputs @ kernel + bias)`, and adds
    kl_weight * KL(q || p) to the layer's losses: exact with
    `kl_estimator="analytic"` (TFP's `kl_use_exact=True`, also accepted),
    otherwise TFP's default one-sample Monte Carlo estimate log q(w) - log p(w)
    at the w of the forward pass (Blundell et al. 2015).

    TFP's regression tutorial (`posterior_mean_field`, `prior_trainable`) is

        DenseVariational(units, kernel_initializer="zeros",
                         posterior=MeanFieldNormal(rho_init=math.log(math.e - 1),
                                                   rho_init_stddev=0.0, scale_offset=1e-5),
                         prior=TrainableNormalPrior(), kl_weight=1 / N)

    The posterior's parameters are the layer's `posterior_*` weights (shape
    [D], or as the posterior lays them out); a prior with variables adds
    `prior_*` weights. `kernel_posterior` and `kernel_prior` are q(w) and
    p(w) over the joint vector.

    Args:
        units: positive int, the output dimension.
        posterior: a `tfp_bnn.posteriors.Posterior`, its registered name, or
            None for `MeanFieldNormal()`; any posterior works, also your own
            (see `tfp_bnn.posteriors`).
        prior: a `tfp_bnn.priors.Prior`, its registered name, or None for
            N(0, 1).
        kl_weight: the weight of the KL in the loss, >= 0, usually 1/N for N
            training examples; None leaves it at 1.0 until a
            `tfp_bnn.callbacks.KLScheduler` sets it.
        kl_use_exact: TFP's name of the estimator: True is
            `kl_estimator="analytic"`, False `kl_estimator="mc"`. Give it or
            `kl_estimator`; both must agree. None (default) with no
            `kl_estimator` is TFP's default, the Monte Carlo estimate.
        activation: activation function or its name, as in
            `keras.layers.Dense` (default None: linear).
        use_bias: whether w has a bias part (default True).
        seed: int or None; seeds the weight noise and the initial weights.
        kernel_initializer: initializer of the posterior mean of the kernel
            part of w (default "glorot_uniform").
        bias_initializer: initializer of the posterior mean of the bias part
            of w (default "zeros").
        kernel_regularizer: regularizer of the kernel part of the posterior
            mean.
        bias_regularizer: regularizer of the bias part of the posterior mean.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the kernel part of the posterior
            mean.
        bias_constraint: constraint on the bias part of the posterior mean.
        kl_estimator: "analytic" (closed-form KL; the prior and posterior
            must have one), "mc" (one-sample Monte Carlo log q(w) - log p(w)
            at the w of the forward pass) or "auto" (analytic where TFP has
            it), the name every tfp_bnn layer uses; None follows
            `kl_use_exact`. The config stores this name.
        **kwargs: base layer keyword arguments (`name`, `dtype`, `trainable`,
            ...).

    Call arguments:
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> layer = DenseVariational(
    ...     4, posterior=tfp_bnn.posteriors.FullCovarianceNormal(),
    ...     prior=tfp_bnn.priors.TrainableNormalPrior(), kl_weight=1 / 1000, seed=0)
    >>> layer(keras.ops.ones((2, 3))).shape
    TensorShape([2, 4])
    """

    def __init__(self, units, posterior=None, prior=None, kl_weight=None, kl_use_exact=None,
                 activation=None, use_bias=True, seed=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 kl_estimator=None, **kwargs):
        for name, advice in _REPLACED.items():
            if name in kwargs:
                raise ValueError(
                    f"`{name}` is not an argument of DenseVariational: {advice}; "
                    f"got {name}={kwargs[name]!r}."
                )
        for name, argument in _BUILDERS.items():
            if name in kwargs:
                raise ValueError(
                    f"`{name}` is not an argument of DenseVariational: "
                    f"{builder_advice(argument, kwargs[name])}; got {name}={kwargs[name]!r}."
                )
        # TFP's signature is DenseVariational(units, make_posterior_fn, make_prior_fn).
        for name, argument, value in (("make_posterior_fn", "posterior", posterior),
                                      ("make_prior_fn", "prior", prior)):
            if callable(value) and not isinstance(value, (posteriors_lib.Posterior,
                                                          priors_lib.Prior)):
                raise ValueError(
                    f"`{argument}` got a function, as TFP's positional `{name}`: "
                    f"{builder_advice(argument, value)}; got {argument}={value!r}."
                )
        prior = priors_lib.get(prior)
        kl_estimator = _estimator(kl_estimator, kl_use_exact, prior)
        super().__init__(
            units, activation=activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, posterior=posterior, prior=prior,
            kl_weight=kl_weight, kl_estimator=kl_estimator, seed=seed, **kwargs,
        )
        self._joint = None

    @property
    def kl_use_exact(self):
        """Whether the KL is the closed form (TFP's name; `kl_estimator` says the same)."""
        return self._use_analytic_kl()

    def build(self, input_shape):
        kernel_shape, _, _ = self._dense_shapes(input_shape)
        joint = _Joint(self, kernel_shape)
        self._joint = joint
        self.kernel_params = self.posterior.build(
            self,
            "posterior",
            (joint.size,),
            loc_initializer=joint.initializer(self.kernel_initializer, self.bias_initializer,
                                              self.seed),
            regularizer=joint.regularizer(self.kernel_regularizer, self.bias_regularizer),
            constraint=joint.constraint(self.kernel_constraint, self.bias_constraint),
            seed=self.seed,
        )
        self._kernel_prior_built = self.prior.build(self, "prior", (joint.size,))

    def _variational_call(self, inputs, training):
        """One w ~ q for the batch, split into kernel and bias (Blundell et al. 2015, sec. 3.2)."""
        noise_scale = self._noise_scale(training)
        seeds = self._call_seeds()
        draw = self._draw(self.kernel_params, seeds[0])
        mean = ops.cast(self.posterior.mean(draw.prepared), self.compute_dtype)
        kernel, bias = self._joint.split(mean + self._scaled(draw.perturbation, noise_scale))
        self._add_kl(inputs, training, draw, None)
        return self._finish(self._apply_kernel(inputs, kernel), bias)

    def predictive_samples(self, num_samples):
        """S samples of w split into kernels and biases.

        Args:
            num_samples: S, an int or a scalar int tensor.

        Returns:
            (kernels [S, in, units], biases [S, units] or None without a bias).
        """
        with float32_variables():
            weights = self._sample_n(self.kernel_params, num_samples, self._call_seeds()[0],
                                     self._noise_scale(False))
        return self._joint.split(weights)

    def posterior_moments(self):
        """Means and variances of the kernel and bias parts of w.

        Returns:
            (kernel_loc, kernel_var, bias_loc, bias_var) of a location-scale
            posterior, float32 (variances 0 in mean mode); see
            `BayesianLayer.posterior_moments`.
        """
        self._require_location_scale()
        with float32_variables():
            off = ops.cast(self._noise_scale(False), "float32")
            loc, scale = self.posterior.loc_scale(self.posterior.prepare(self.kernel_params))
            kernel_loc, bias_loc = self._joint.split(ops.cast(loc, "float32"))
            kernel_var, bias_var = self._joint.split(ops.square(ops.cast(scale, "float32")) * off)
            return kernel_loc, kernel_var, bias_loc, bias_var

    def get_config(self):
        config = super().get_config()
        # One name in the config, the one every layer uses; configs saved
        # with `kl_use_exact` alone load through the constructor's alias.
        config.pop("bayesian_bias")
        return config


def _estimator(kl_estimator, kl_use_exact, prior):
    """The `kl_estimator` that `kl_estimator` and TFP's `kl_use_exact` say together."""
    estimator = kl_estimator_with_tfp_alias(kl_estimator, "kl_use_exact", kl_use_exact)
    if kl_use_exact and not prior.has_analytic_kl:
        raise ValueError(
            f"`kl_use_exact`=True needs a prior with a closed-form KL; {prior!r} has "
            "none. Use kl_use_exact=False (the Monte Carlo estimate)."
        )
    return estimator

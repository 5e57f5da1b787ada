"""The machinery every variational layer shares.

`BayesianLayer` owns what is the same for Dense and convolutional variational
layers: argument validation, the posterior and prior objects, the variational
parameters of kernel and bias, the KL term and its weight, the mean-mode
switch, and the seeded noise generator. Subclasses only say how a kernel is
shaped and how the perturbed kernel meets the inputs. Its parts live in
private modules: the KL term in `_variational_kl`, the state shared with
the node-based layers in `_stochastic`, Monte Carlo weight samples in
`_weight_samples`. Each estimator's math is written once in
`_estimators` (reparameterization, Flipout), which the Dense, Conv and
Embedding layers call; the local reparameterization trick, which only a
Dense layer can do, is `DenseLocalReparameterization`'s own method.

The objective, said once and the same everywhere in tfp_bnn:

    ELBO loss per example = mean NLL over the batch + kl_weight * KL(q || p)

with kl_weight = 1/N for N training examples (set by
`tfp_bnn.callbacks.KLScheduler(num_examples=N)` or passed as `kl_weight=`).
Summed over the M = N/B batches of an epoch this is (1/B) times Blundell et
al.'s minibatch objective with the KL spread evenly over the batches
(Blundell et al. 2015, eq. 8).
"""

import keras
from keras import ops

from tfp_bnn import _variables
from tfp_bnn import posteriors as posteriors_lib
from tfp_bnn._substrate import tfd
from tfp_bnn._tfp_names import reject_tfp_arguments
from tfp_bnn import priors as priors_lib
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers._shapes import set_weight_arguments
from tfp_bnn.layers._shapes import weight_arguments_config
from tfp_bnn.layers._tracing import flag as _flag
from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.layers.variational._variational_kl import VariationalKL
from tfp_bnn.layers.variational._variational_kl import check_kl_estimator
from tfp_bnn.layers.variational._weight_samples import WeightSampling


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BayesianLayer(WeightSampling, VariationalKL, keras.layers.Layer):
    """Base class of tfp_bnn's variational layers.

    Args:
        activation: activation function or its name, as in
            `keras.layers.Dense` (default: none, linear).
        use_bias: whether the layer adds a bias (default True).
        kernel_initializer: initializer of the kernel's posterior mean, as
            in `keras.layers.Dense` (default "glorot_uniform").
        bias_initializer: initializer of the bias (of its posterior mean with
            `bayesian_bias=True`), default "zeros".
        kernel_regularizer: regularizer of the kernel's posterior mean.
        bias_regularizer: regularizer of the bias (posterior mean).
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the kernel's posterior mean.
        bias_constraint: constraint on the bias (posterior mean).
        posterior: a `tfp_bnn.posteriors.Posterior`, its name, or None for
            `MeanFieldNormal()`.
        prior: a `tfp_bnn.priors.Prior`, its name, or None for N(0, 1).
        kl_weight: the weight of this layer's KL in the loss, >= 0, usually
            1/N for N training examples. None leaves it at 1.0 until a
            `KLScheduler` sets it (a warning is raised if training starts
            with it unset).
        kl_estimator: "analytic" (closed-form KL, needs a prior with one),
            "mc" (log q(w) - log p(w) at a posterior sample, Blundell et al. 2015), or
            "auto" (analytic when TFP has it, else Monte Carlo).
        bayesian_bias: if True the bias gets a posterior and a prior too;
            the default is a deterministic bias, as in TFP.
        seed: int or None; seeds the weight noise and the initial weights.
        **kwargs: base layer keyword arguments (`name`, `dtype`,
            `trainable`, ...); TFP's argument names (`kernel_prior_fn`, ...)
            are refused with a message naming their replacement.

    Call arguments:
        inputs: the input tensor.
        training: True in `fit` (weights always sampled); otherwise the layer
            samples unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Example:
    Every variational layer is a `BayesianLayer`; its posterior and prior
    are `tfd.Distribution`s, and its KL enters `layer.losses`:

    >>> layer = tfp_bnn.layers.DenseReparameterization(2, kl_weight=1 / 100, seed=0)
    >>> outputs = layer(np.ones((4, 3), "float32"))
    >>> isinstance(layer, BayesianLayer), layer.kernel_posterior.event_shape
    (True, TensorShape([3, 2]))
    >>> len(layer.losses)   # kl_weight * KL(q || p)
    1
    """

    # True for the estimators that need w = loc + scale * eps (Flipout, local
    # reparameterization): the constructor refuses other posteriors.
    requires_location_scale = False

    def __init__(
        self,
        activation=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        posterior=None,
        prior=None,
        kl_weight=None,
        kl_estimator="auto",
        bayesian_bias=False,
        seed=None,
        **kwargs,
    ):
        # Before Keras, whose error would only say "Unrecognized keyword arguments".
        reject_tfp_arguments(type(self).__name__, kwargs)
        # Variables stay float32 inside call under mixed precision (see
        # `_mixed_precision`): the layer casts what enters the forward pass,
        # and KL terms stay float32.
        kwargs["autocast"] = False
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        set_weight_arguments(self, activation, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer, kernel_constraint,
                             bias_constraint)
        self.posterior = posteriors_lib.get(posterior)
        self.prior = priors_lib.get(prior)
        if self.requires_location_scale:
            self._require_location_scale()
        self.kl_estimator = check_kl_estimator(kl_estimator, self.prior)
        self.bayesian_bias = bool(bayesian_bias)
        self._create_stochastic_state(kl_weight, seed)
        self.kernel_params = None
        self.bias_params = None
        self.bias = None
        # What `prior.build` returned for the kernel and the Bayesian bias
        # (the prior itself, or a copy holding the prior's variables).
        self._kernel_prior_built = None
        self._bias_prior_built = None

    # -- construction helpers -------------------------------------------------
    def _require_location_scale(self):
        if not self.posterior.is_location_scale:
            raise ValueError(
                f"{type(self).__name__} needs a location-scale posterior "
                f"(w = loc + scale * eps, e.g. MeanFieldNormal), got {self.posterior!r}."
            )

    def _variational_weight(self, name, shape, initializer, regularizer, constraint, seed):
        """The posterior parameters of weight `name` and what `prior.build` returned for it."""
        params = self.posterior.build(self, name, shape, loc_initializer=initializer,
                                      regularizer=regularizer, constraint=constraint, seed=seed)
        return params, self.prior.build(self, f"{name}_prior", shape)

    def _build_weights(self, kernel_shape, bias_shape):
        self.kernel_params, self._kernel_prior_built = self._variational_weight(
            "kernel", kernel_shape, self.kernel_initializer, self.kernel_regularizer,
            self.kernel_constraint, self.seed)
        if not self.use_bias:
            return
        if self.bayesian_bias:
            self.bias_params, self._bias_prior_built = self._variational_weight(
                "bias", bias_shape, self.bias_initializer, self.bias_regularizer,
                self.bias_constraint, None if self.seed is None else self.seed + 2)
        else:
            self.bias = self.add_weight(
                name="bias",
                shape=bias_shape,
                initializer=posteriors_lib.seeded_initializer(
                    self.bias_initializer, None if self.seed is None else self.seed + 2
                ),
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )

    # -- inspection (attributes, as in tfp.layers) -----------------------------
    # Properties, not methods: ported code reads `layer.kernel_posterior.mean()`
    # and `layer.kernel_posterior.distribution.scale` as with TFP. Each read
    # builds the distribution from the current variables; None before `build`.
    @property
    def kernel_posterior(self):
        """q(kernel), a `tfd.Distribution` with event shape = kernel shape (None unbuilt)."""
        return self._weight_posterior(self.kernel_params)

    @property
    def kernel_prior(self):
        """p(kernel), a `tfd.Distribution` with event shape = kernel shape (None unbuilt)."""
        return self._weight_prior(self.kernel_params)

    def _weight_posterior(self, params):
        """q of the weight `params` parameterize, event shape = its shape (None unbuilt)."""
        if params is None:
            return None
        dist = self.posterior.distribution(self.posterior.prepare(params))
        return tfd.Independent(dist, reinterpreted_batch_ndims=len(dist.batch_shape))

    def _weight_prior(self, params):
        """p of the weight `params` parameterize, event shape = its shape (None unbuilt)."""
        if params is None:
            return None
        return self._prior_for(params).distribution(params[0].shape)

    @property
    def bias_posterior(self):
        """q(bias): Normal-like with `bayesian_bias=True`, else a point mass as in TFP.

        A deterministic bias is `Independent(Deterministic(bias))` (TFP's
        default `is_singular=True` posterior); None without a bias or unbuilt.
        """
        if self.bias_params is not None:
            return self._weight_posterior(self.bias_params)
        if self.bias is None:
            return None
        return tfd.Independent(tfd.Deterministic(_variables.read(self.bias)),
                               reinterpreted_batch_ndims=len(self.bias.shape))

    @property
    def bias_prior(self):
        """p(bias) with `bayesian_bias=True`; None otherwise (TFP's bias_prior_fn=None)."""
        if self.bias_params is None:
            return None
        return self._prior_for(self.bias_params).distribution(self.bias_params[0].shape)

    def posterior_moments(self):
        """Means and variances of the weights, for sampling-free propagation.

        Returns a tuple (kernel_loc, kernel_var, bias_loc, bias_var) of float32
        tensors: the kernel's posterior mean and per-weight variance, and the
        bias's (a deterministic bias has variance 0; without a bias both are
        None). In mean mode the variances are 0, as sampling would be.
        `tfp_bnn.moments` reads these to push means and covariances through
        the network instead of weight samples.

        Returns:
            (kernel_loc, kernel_var, bias_loc, bias_var), float32 tensors or
            None as said above.

        Raises:
            ValueError: if the posterior is not location-scale (a flow
                posterior has no per-weight variance that describes it).
        """
        self._require_location_scale()
        with float32_variables():
            off = (ops.convert_to_tensor(0.0) if _flag("force_mean")
                   else ops.cast(self.sampling, "float32"))
            loc, scale = self.posterior.loc_scale(self.posterior.prepare(self.kernel_params))
            kernel = (ops.cast(loc, "float32"), ops.square(ops.cast(scale, "float32")) * off)
            if not self.use_bias:
                return kernel + (None, None)
            if self.bias_params is None:
                bias = ops.cast(_variables.read(self.bias), "float32")
                return kernel + (bias, ops.zeros_like(bias))
            loc, scale = self.posterior.loc_scale(self.posterior.prepare(self.bias_params))
            return kernel + (ops.cast(loc, "float32"),
                             ops.square(ops.cast(scale, "float32")) * off)

    # -- call helpers ---------------------------------------------------------
    @staticmethod
    def _scaled(noise, noise_scale):
        return noise if noise_scale is None else noise * noise_scale

    def _bias_value(self, noise_scale, seed):
        """The bias in compute dtype and its posterior draw (or None)."""
        if not self.use_bias:
            return None, None
        if self.bias_params is None:
            return ops.cast(self.bias, self.compute_dtype), None
        draw = self._draw(self.bias_params, seed)
        mean = ops.cast(self.posterior.mean(draw.prepared), self.compute_dtype)
        return mean + self._scaled(draw.perturbation, noise_scale), draw

    def _apply_kernel(self, inputs, kernel):
        """inputs (*) kernel: matmul for Dense, convolution for Conv."""
        raise NotImplementedError

    def _shape_bias(self, bias):
        """Reshapes a bias vector to broadcast against the outputs."""
        return bias

    def _finish(self, outputs, bias):
        if bias is not None:
            outputs = outputs + self._shape_bias(bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def call(self, inputs, training=None):
        with float32_variables():
            inputs = ops.cast(inputs, self.compute_dtype)
            context = sample_context()
            if context is not None and not training:
                return self._sampled_call(inputs, context)
            return self._variational_call(inputs, training)

    def _variational_call(self, inputs, training):
        """The layer's computation on inputs already cast to the compute dtype."""
        raise NotImplementedError

    # -- serialization --------------------------------------------------------
    def get_config(self):
        config = super().get_config()
        config.update(weight_arguments_config(self))
        config.update(variational_config(self))
        return config


def variational_config(layer):
    """The config entries of the variational arguments every Bayesian layer takes.

    Shared by `BayesianLayer` and the composite layers (attention, transformer
    block) that pass these arguments on to their variational sublayers.
    """
    return {
        "posterior": keras.saving.serialize_keras_object(layer.posterior),
        "prior": keras.saving.serialize_keras_object(layer.prior),
        "kl_weight": layer._initial_kl_weight,
        "kl_estimator": layer.kl_estimator,
        "bayesian_bias": layer.bayesian_bias,
        "seed": layer.seed,
    }

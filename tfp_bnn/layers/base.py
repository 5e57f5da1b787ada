"""The machinery every variational layer shares.

`BayesianLayer` owns what is the same for Dense and convolutional variational
layers: argument validation, the posterior and prior objects, the variational
parameters of kernel and bias, the KL term and its weight, the mean-mode
switch, and the seeded noise generator. Subclasses only say how a kernel is
shaped and how the perturbed kernel meets the inputs.

The objective, said once and the same everywhere in tfp_bnn:

    ELBO loss per example = mean NLL over the batch + kl_weight * KL(q || p)

with kl_weight = 1/N for N training examples (set by
`tfp_bnn.callbacks.KLScheduler(num_examples=N)` or passed as `kl_weight=`).
Summed over the M = N/B batches of an epoch this is (1/B) times Blundell et
al.'s minibatch objective with the KL spread evenly over the batches
(seed 002, eq. 8).
"""

import contextlib
import math
import warnings

import keras
import tensorflow as tf
import tensorflow_probability as tfp
from keras import ops

from tfp_bnn import noise
from tfp_bnn import posteriors as posteriors_lib
from tfp_bnn._tfp_names import reject_tfp_arguments
from tfp_bnn import priors as priors_lib
from tfp_bnn.layers._kl_tracking import KLTracking
from tfp_bnn.layers._shapes import set_weight_arguments
from tfp_bnn.layers._shapes import weight_arguments_config
from tfp_bnn.layers._tracing import flag as _flag
from tfp_bnn.layers._tracing import sample_context

tfd = tfp.distributions

KL_ESTIMATORS = ("auto", "analytic", "mc")

def _float32_variables():
    """Reads variables at their own dtype inside this block.

    Keras 3 enters an autocast scope for every layer whose compute and
    variable dtypes differ (mixed precision), even with `autocast=False`, so
    reading a variable inside `call` would give float16 parameters and a
    float16 KL. The layers cast what enters the forward pass themselves.
    """
    try:
        from keras.src.backend import AutocastScope  # noqa: PLC0415
    except ImportError:  # pragma: no cover - Keras moved its private scope
        return contextlib.nullcontext()
    return AutocastScope(None)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BayesianLayer(KLTracking, keras.layers.Layer):
    """Base class of tfp_bnn's variational layers.

    Args:
        activation, use_bias, kernel_initializer, bias_initializer,
        kernel_regularizer, bias_regularizer, activity_regularizer,
        kernel_constraint, bias_constraint: as in `keras.layers.Dense`.
            The kernel initializer, regularizer and constraint apply to the
            posterior mean of the kernel.
        posterior: a `tfp_bnn.posteriors.Posterior`, its name, or None for
            `MeanFieldNormal()`.
        prior: a `tfp_bnn.priors.Prior`, its name, or None for N(0, 1).
        kl_weight: the weight of this layer's KL in the loss, >= 0, usually
            1/N for N training examples. None leaves it at 1.0 until a
            `KLScheduler` sets it (a warning is raised if training starts
            with it unset).
        kl_estimator: "analytic" (closed-form KL, needs a prior with one),
            "mc" (log q(w) - log p(w) at a posterior sample, seed 002), or
            "auto" (analytic when TFP has it, else Monte Carlo).
        bayesian_bias: if True the bias gets a posterior and a prior too;
            the default is a deterministic bias, as in TFP.
        seed: int or None; seeds the weight noise and the initial weights.
    """

    # Has a `sampling` switch that tfp_bnn.set_mean_mode turns (tfp_bnn/modes.py).
    stochastic_layer = True

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
        # `_float32_variables`): the layer casts what enters the forward pass,
        # and KL terms stay float32.
        kwargs["autocast"] = False
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        set_weight_arguments(self, activation, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer, kernel_constraint,
                             bias_constraint)
        self.posterior = posteriors_lib.get(posterior)
        self.prior = priors_lib.get(prior)
        if kl_weight is not None:
            kl_weight = float(kl_weight)
            if not math.isfinite(kl_weight) or kl_weight < 0:
                raise ValueError(
                    f"`kl_weight` must be a finite number >= 0 or None, got {kl_weight!r}."
                )
        self._initial_kl_weight = kl_weight
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"`kl_estimator` must be one of {KL_ESTIMATORS}, got {kl_estimator!r}."
            )
        if kl_estimator == "analytic" and not self.prior.has_analytic_kl:
            raise ValueError(
                f"`kl_estimator`='analytic' needs a prior with a closed-form KL; "
                f"{self.prior!r} has none. Use kl_estimator='mc' or 'auto'."
            )
        self.kl_estimator = kl_estimator
        self.bayesian_bias = bool(bayesian_bias)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"`seed` must be a non-negative int or None, got {seed!r}.")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.kl_weight = self.add_weight(
            name="kl_weight",
            shape=(),
            dtype="float32",
            initializer=keras.initializers.Constant(1.0 if kl_weight is None else kl_weight),
            trainable=False,
        )
        # 1.0: inference samples weights; 0.0: inference uses posterior means.
        self.sampling = self.add_weight(
            name="sampling",
            shape=(),
            dtype="float32",
            initializer="ones",
            trainable=False,
        )
        self._create_kl_tracker()
        self._warned_unset_kl_weight = False
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

    def _build_weights(self, kernel_shape, bias_shape):
        self.kernel_params = self.posterior.build(
            self,
            "kernel",
            kernel_shape,
            loc_initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
            seed=self.seed,
        )
        self._kernel_prior_built = self.prior.build(self, "kernel_prior", kernel_shape)
        if not self.use_bias:
            return
        if self.bayesian_bias:
            self.bias_params = self.posterior.build(
                self,
                "bias",
                bias_shape,
                loc_initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
                seed=None if self.seed is None else self.seed + 2,
            )
            self._bias_prior_built = self.prior.build(self, "bias_prior", bias_shape)
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
        if self.kernel_params is None:
            return None
        dist = self.posterior.distribution(self.posterior.prepare(self.kernel_params))
        return tfd.Independent(dist, reinterpreted_batch_ndims=len(dist.batch_shape))

    @property
    def kernel_prior(self):
        """p(kernel), a `tfd.Distribution` with event shape = kernel shape (None unbuilt)."""
        if self.kernel_params is None:
            return None
        return self._prior_for(self.kernel_params).distribution(self.kernel_params[0].shape)

    @property
    def bias_posterior(self):
        """q(bias): Normal-like with `bayesian_bias=True`, else a point mass as in TFP.

        A deterministic bias is `Independent(Deterministic(bias))` (TFP's
        default `is_singular=True` posterior); None without a bias or unbuilt.
        """
        if self.bias_params is not None:
            dist = self.posterior.distribution(self.posterior.prepare(self.bias_params))
            return tfd.Independent(dist, reinterpreted_batch_ndims=1)
        if self.bias is None:
            return None
        return tfd.Independent(tfd.Deterministic(tf.convert_to_tensor(self.bias)),
                               reinterpreted_batch_ndims=1)

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

        Raises:
            ValueError: if the posterior is not location-scale (a flow
                posterior has no per-weight variance that describes it).
        """
        self._require_location_scale()
        with _float32_variables():
            off = tf.constant(0.0) if _flag("force_mean") else tf.cast(self.sampling, "float32")
            loc, scale = self.posterior.loc_scale(self.posterior.prepare(self.kernel_params))
            kernel = (tf.cast(loc, "float32"), tf.square(tf.cast(scale, "float32")) * off)
            if not self.use_bias:
                return kernel + (None, None)
            if self.bias_params is None:
                bias = tf.cast(tf.convert_to_tensor(self.bias), "float32")
                return kernel + (bias, tf.zeros_like(bias))
            loc, scale = self.posterior.loc_scale(self.posterior.prepare(self.bias_params))
            return kernel + (tf.cast(loc, "float32"), tf.square(tf.cast(scale, "float32")) * off)

    def kl_divergence(self):
        """KL(q || p) of this layer's weights, unweighted, in nats.

        Exact when the estimator is analytic; otherwise a one-sample Monte
        Carlo estimate.
        """
        # Float32 variables even when called from a mixed-precision model's
        # call (the moment path), whose autocast scope would read them as
        # float16 and give a float16 KL.
        with _float32_variables():
            # The closed form needs no noise: leave the seed generator untouched.
            seeds = (None, None) if self._use_analytic_kl() else self._call_seeds()
            kl = self._kl_of(self._draw(self.kernel_params, seeds[0], with_noise=False))
            if self.bias_params is not None:
                kl = kl + self._kl_of(self._draw(self.bias_params, seeds[1],
                                                 with_noise=False))
            return kl

    # -- call helpers ---------------------------------------------------------
    def _noise_scale(self, training):
        """None while training (full noise); at inference the `sampling` switch.

        Returning None rather than a constant 1 spares the training step a
        multiply over every weight and output, and its backward pass.
        """
        dtype = self.compute_dtype
        if training:
            return None
        if _flag("force_mean"):
            return tf.constant(0.0, dtype)
        return tf.cast(self.sampling, dtype)

    @staticmethod
    def _scaled(noise, noise_scale):
        return noise if noise_scale is None else noise * noise_scale

    def _bias_value(self, noise_scale, seed):
        """The bias in compute dtype and its posterior draw (or None)."""
        if not self.use_bias:
            return None, None
        if self.bias_params is None:
            return tf.cast(self.bias, self.compute_dtype), None
        draw = self._draw(self.bias_params, seed)
        mean = tf.cast(self.posterior.mean(draw.prepared), self.compute_dtype)
        return mean + self._scaled(draw.perturbation, noise_scale), draw

    def _draw(self, params, seed, with_noise=True):
        """The posterior's draw for this call, with the closed-form KL if used."""
        weight_prior = self._prior_for(params)
        prior = weight_prior if self._use_analytic_kl() else None
        draw = self.posterior.draw(
            params, seed, self.compute_dtype, prior, with_noise=with_noise or prior is None
        )
        return draw._replace(prior=weight_prior)

    def _prior_for(self, params):
        """The prior of the weights `params` parameterize (see `Prior.build`)."""
        built = self._bias_prior_built if params is self.bias_params else self._kernel_prior_built
        return self.prior if built is None else built

    def _call_seeds(self):
        """Seeds for this call's draws: kernel, bias, and two for the layer's own use."""
        return noise.call_seeds(self.seed_generator, 4)

    def _use_analytic_kl(self):
        if self.kl_estimator == "analytic":
            return True
        return self.kl_estimator == "auto" and self.prior.has_analytic_kl

    def _kl_of(self, draw):
        """KL(q || p) summed over elements: closed form, or MC at mean + perturbation.

        mean + perturbation is a posterior sample: while training with the
        reparameterization estimator it is the very kernel of the forward pass
        (seed 002, step 4); in mean mode it is still a genuine sample.
        """
        if draw.kl is not None:
            return draw.kl
        mean = tf.cast(self.posterior.mean(draw.prepared), "float32")
        sample = mean + tf.cast(draw.perturbation, "float32")
        p = (draw.prior or self.prior).element_distribution("float32")
        if draw.log_prob is not None:  # log q of the sample, computed by the posterior
            return draw.log_prob - tf.reduce_sum(p.log_prob(sample))
        log_q = self.posterior.distribution(draw.prepared).log_prob(sample)
        log_p = p.log_prob(sample)
        if log_q.shape == log_p.shape:  # element-wise q: difference first, less cancellation
            return tf.reduce_sum(log_q - log_p)
        return tf.reduce_sum(log_q) - tf.reduce_sum(log_p)  # q joint over the weights

    def _add_kl(self, inputs, training, kernel_draw, bias_draw):
        """Adds kl_weight * KL to the layer's losses and its tracker.

        Once per outer call: a layer called again in the same forward pass
        (shared, `TimeDistributed`, an RNN cell) adds nothing more, and in a
        loop body the term is deferred to after the loop (`kl_tracking`).
        """
        if _flag("skip_kl"):
            return
        if training and self._initial_kl_weight is None and not self._warned_unset_kl_weight:
            self._warned_unset_kl_weight = True
            if not getattr(self, "_kl_weight_managed", False):
                warnings.warn(
                    f"Layer '{self.name}' trains with kl_weight=1.0 because none was "
                    "given: the per-example objective needs kl_weight = 1/N. Pass "
                    "kl_weight=1/N or use tfp_bnn.callbacks.KLScheduler(num_examples=N).",
                    stacklevel=3,
                )
        if not self._claim_kl(inputs.shape[0] if inputs.shape.rank else None):
            return
        kl = self._kl_of(kernel_draw)
        if bias_draw is not None:
            kl = kl + self._kl_of(bias_draw)
        penalty = self._tracked_penalty(kl, tf.shape(inputs)[0])
        # Each replica adds the whole KL; Keras's TensorFlow trainer divides
        # `add_loss` terms by the replica count before gradients are summed
        # across replicas, so the KL counts once per step
        # (tests/distribute/test_mirrored.py holds Keras to that).
        self.add_loss(penalty)

    def _tracked_penalty(self, kl, batch_size):
        """kl_weight * kl, logged in this layer's `kl` tracker for `batch_size` rows."""
        penalty = self.kl_weight * kl
        self._record_kl(penalty, batch_size)
        return penalty

    def _deferred_kl_penalty(self, rows):
        """The KL term of a call made inside a loop body, built after the loop."""
        return self.kl_penalty(rows)

    def kl_penalty(self, batch_size):
        """kl_weight * KL(q || p) as this layer's call would add it, for a model
        that uses the layer's posterior without calling it (e.g. moment
        propagation, `tfp_bnn.moments`). Logs it like a call (`KLScheduler`'s
        `kl` and `data_loss`); the caller adds the returned term with `add_loss`.
        """
        with _float32_variables():  # kl_weight in float32 too
            return self._tracked_penalty(self.kl_divergence(), batch_size)

    def _apply_kernel(self, inputs, kernel):
        """inputs (*) kernel: matmul for Dense, convolution for Conv."""
        raise NotImplementedError

    def _shape_bias(self, bias):
        """Reshapes a bias vector to broadcast against the outputs."""
        return bias

    def _flipout_sign_shapes(self, inputs, outputs):
        """Shapes of Flipout's input and output sign tensors (per position)."""
        return tf.shape(inputs), tf.shape(outputs)

    def _finish(self, outputs, bias):
        if bias is not None:
            outputs = outputs + self._shape_bias(bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def call(self, inputs, training=None):
        with _float32_variables():
            inputs = ops.cast(inputs, self.compute_dtype)
            context = sample_context()
            if context is not None and not training:
                return self._sampled_call(inputs, context)
            return self._variational_call(inputs, training)

    def _variational_call(self, inputs, training):
        """The layer's computation on inputs already cast to the compute dtype."""
        raise NotImplementedError

    def _reparameterization_call(self, inputs, training):
        """One kernel sample w ~ q shared by the batch (seed 002, sec. 3.2)."""
        noise_scale = self._noise_scale(training)
        seeds = self._call_seeds()
        draw = self._draw(self.kernel_params, seeds[0])
        mean = tf.cast(self.posterior.mean(draw.prepared), self.compute_dtype)
        kernel = mean + self._scaled(draw.perturbation, noise_scale)
        bias, bias_draw = self._bias_value(noise_scale, seeds[1])
        self._add_kl(inputs, training, draw, bias_draw)
        return self._finish(self._apply_kernel(inputs, kernel), bias)

    def _flipout_call(self, inputs, training):
        """y = x (*) loc + ((x * s) (*) delta) * r, delta = scale * eps (Wen et al. 2018)."""
        dtype = self.compute_dtype
        noise_scale = self._noise_scale(training)
        seeds = self._call_seeds()
        draw = self._draw(self.kernel_params, seeds[0])
        loc, _ = self.posterior.loc_scale(draw.prepared)
        outputs = self._apply_kernel(inputs, tf.cast(loc, dtype))
        in_shape, out_shape = self._flipout_sign_shapes(inputs, outputs)
        sign_in = noise.signs(in_shape, dtype, seeds[2])
        sign_out = noise.signs(out_shape, dtype, seeds[3])
        perturbation = self._apply_kernel(inputs * sign_in, draw.perturbation) * sign_out
        outputs = outputs + self._scaled(perturbation, noise_scale)
        bias, bias_draw = self._bias_value(noise_scale, seeds[1])
        self._add_kl(inputs, training, draw, bias_draw)
        return self._finish(outputs, bias)

    # -- many weight samples in one call (tfp_bnn.predict) ----------------------
    def predictive_samples(self, num_samples):
        """S independent posterior samples of this layer's random weights.

        Returns a tuple (kernels [S, *kernel_shape], biases [S, units] or
        None), in the compute dtype; in mean mode every sample is the
        posterior mean. Used by `tfp_bnn.predict`, which draws them once and
        passes them to the calls of a `sample_trace` block.
        """
        with _float32_variables():
            noise_scale = self._noise_scale(False)
            seeds = self._call_seeds()
            kernels = self._sample_n(self.kernel_params, num_samples, seeds[0], noise_scale)
            biases = None
            if self.bias_params is not None:
                biases = self._sample_n(self.bias_params, num_samples, seeds[1], noise_scale)
            return kernels, biases

    def _sample_n(self, params, num_samples, seed, noise_scale):
        prepared = self.posterior.prepare(params)
        return self.posterior.sample_n(prepared, num_samples, seed, self.compute_dtype,
                                       noise_scale)

    def _sampled_call(self, inputs, context):
        """inputs tiled [S * B, ...] sample-major; slice s uses weight sample s."""
        num_samples = context.num_samples
        draws = context.draws.get(id(self))
        if draws is None:
            draws = self.predictive_samples(num_samples)
        kernels, biases = draws
        shape = tf.shape(inputs)
        sliced = tf.reshape(inputs, tf.concat([[num_samples, -1], shape[1:]], axis=0))
        outputs = self._apply_sampled_kernels(sliced, kernels)
        if biases is not None:
            rank = outputs.shape.rank
            outputs = outputs + tf.reshape(biases, self._sampled_bias_shape(rank, num_samples))
        elif self.use_bias:
            outputs = outputs + self._shape_bias(tf.cast(self.bias, self.compute_dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        out_shape = tf.shape(outputs)
        return tf.reshape(outputs, tf.concat([[-1], out_shape[2:]], axis=0))

    def _apply_sampled_kernels(self, sliced, kernels):
        """[S, B, ...] inputs, [S, *kernel_shape] kernels -> [S, B, ...] outputs."""
        dtype = self.compute_dtype
        return tf.map_fn(
            lambda pair: self._apply_kernel(pair[0], pair[1]),
            (sliced, kernels),
            fn_output_signature=tf.TensorSpec(None, dtype),
        )

    def _sampled_bias_shape(self, rank, num_samples):
        """Shape that broadcasts [S, units] biases against [S, B, ...] outputs."""
        return [num_samples] + [1] * (rank - 2) + [-1]

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

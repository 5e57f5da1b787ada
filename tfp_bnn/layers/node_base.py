"""The machinery the node-based Bayesian layers share (Trinh et al. 2022).

A node-based BNN keeps the weights U, b deterministic (point estimates,
ordinary Keras weights) and makes the nodes random: latent multiplicative
variables z scale the layer's inputs and/or outputs (seed 001):

    f(x) = act(z_out o (U (z_in o x) + b))

`noise="input"` draws z_in (one per input feature / input channel),
`"output"` draws z_out (one per unit / output channel, applied to the
pre-activation output, shared over spatial positions), `"both"` draws both.
Every example (row of the batch) gets its own z, in training and at
inference; mean mode (`tfp_bnn.set_mean_mode`) replaces the draws at
inference by the component's centre: z = mu_k for the Gaussian, NF(mu_k)
for flows (the image of the base mean, not the mean of q; it is
deterministic and what the seed's "mean" network would use). Training always
samples.

Posterior of each site, a uniform mixture of K components (`num_components`):

    gaussian:  z ~ N(mu_k, diag(sigma_k^2)),  sigma_k = softplus(rho_k)
    flow:      z = NF(z0), z0 ~ N(mu_k, diag(sigma_k^2))   (seed 001: z_l = NF_l(z))

with one flow per site shared by the components. mu starts at N(1, 0.1^2)
(`loc_init_stddev`) so the network starts near its deterministic twin, and
sigma at 0.05 (`scale_init`). The prior is N(prior_mean, prior_stddev^2) per
node, independent.

Components: outside Monte Carlo prediction row i of a batch uses component
i mod K. Inside `tfp_bnn.layers._tracing.sample_trace` (inputs tiled S times
sample-major, row s * B + b) row s * B + b uses component s mod K, so a
prediction over S samples visits every component S / K times and averages
over components and samples alike. s counts the samples of one traced call
(a chunk of `samples_per_call` in `tfp_bnn.predict`), so the balance is
exact when every chunk holds a multiple of K samples. A plain `model(x)` or
`model.predict(x)` with K > 1 gives row i component i mod K, in mean mode
too: its outputs depend on the row's position; use `tfp_bnn.predict` to
average over the components.

The KL term added to the loss (the same ELBO as everywhere in tfp_bnn:
loss per example = mean NLL + kl_weight * KL, kl_weight = 1/N), summed over
nodes and sites:

    gaussian:  (1/K) sum_k KL(N(mu_k, sigma_k^2) || p)            (closed form)
    flow:      (1/R) sum_i [log q0(z0_i | k_i) - log|det J(z0_i)| - log p(z_i)]

over the R rows of the batch (one draw per row, the draws of the forward
pass), z_i = NF(z0_i): the Monte Carlo KL of q_K = NF#q0 with the flow
correction (seed 001, "TLDR"). Deviation from the seed: its derivation
writes the first part as KL(q0 || p), i.e. the prior taken at the base
sample z0; for an unbiased estimate of KL(q_K || p) the prior must be taken
at the transformed sample z = NF(z0), as above. At inference in mean mode
the KL still uses genuine draws. With `entropy_weight` = gamma > 0 the
added loss is kl_weight * (KL - gamma * H[q]), with H[q] the
component-averaged entropy: closed form for the Gaussian,
(1/K) sum_k H[q0_k] + (1/R) sum_i log|det J(z0_i)| for flows. The
`<layer>_kl` tracker records exactly what was added, so `KLScheduler`'s
`data_loss` stays loss minus that term.

A "batch_norm" flow step normalizes with the statistics of the batch's z
rows in training (examples of all components together); the other steps
start near the identity.
"""

import math
import numbers
import warnings

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from keras import ops

from tfp_bnn import noise as noise_lib
from tfp_bnn._tfp_names import reject_tfp_arguments
from tfp_bnn.flows.normalizing_flow import NormalizingFlow
from tfp_bnn.flows.normalizing_flow import flow_names
from tfp_bnn.layers.base import _float32_variables
from tfp_bnn.layers._kl_tracking import KLTracking
from tfp_bnn.layers._shapes import set_weight_arguments
from tfp_bnn.layers._shapes import weight_arguments_config
from tfp_bnn.layers._tracing import flag as _flag
from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.posteriors import FlowPosterior
from tfp_bnn.posteriors import seeded_initializer

NOISE_SITES = ("input", "output", "both")
NODE_POSTERIORS = ("gaussian", "flow")
tfd = tfp.distributions

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)


def _positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}, got {value!r}.")
    return int(value)


def _real(name, value, minimum=None, strict=False):
    """A finite float, optionally > or >= `minimum`, or ValueError naming the argument."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if ok and minimum is not None:
        ok = value > minimum if strict else value >= minimum
    if not ok:
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum}"
        raise ValueError(f"`{name}` must be a finite number{bound}, got {value!r}.")
    return float(value)


def _inverse_softplus(value: float) -> float:
    return math.log(math.expm1(value))


class NodeLayer(KLTracking, keras.layers.Layer):
    """Base class of the node-based Bayesian layers (`NodeDense`, `NodeConv2D`).

    Args:
        activation, use_bias, kernel_initializer, bias_initializer,
        kernel_regularizer, bias_regularizer, activity_regularizer,
        kernel_constraint, bias_constraint: as in `keras.layers.Dense`;
            they concern the deterministic weights U and b.
        noise: which nodes are random: "input", "output" or "both".
        posterior: "gaussian" (diagonal Gaussian per component) or "flow"
            (that Gaussian pushed through a `tfp_bnn.flows.NormalizingFlow`);
            a `tfp_bnn.posteriors.FlowPosterior` stands for "flow" with its
            `flows` and `length`.
        num_components: K >= 1, the number of mixture components.
        prior_mean, prior_stddev: the prior N(prior_mean, prior_stddev^2)
            of every node; prior_stddev > 0.
        flows: the flow kind(s) given to `NormalizingFlow(flows=...)`.
        flow_length: the number of flow steps, an int >= 0 (0: no flow,
            the Gaussian base with a Monte Carlo KL).
        entropy_weight: gamma >= 0; the loss gets kl_weight * (KL - gamma H[q]).
        loc_init_stddev: the posterior means start at N(1, loc_init_stddev^2).
        scale_init: the posterior standard deviations start at this value, > 0.
        kl_weight: the weight of the KL in the loss, >= 0, usually 1/N. None
            leaves it at 1.0 until a `KLScheduler` sets it (with a warning if
            training starts with it unset).
        seed: int or None; seeds the node noise and the initial weights.
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
        noise="input",
        posterior="gaussian",
        num_components=1,
        prior_mean=1.0,
        prior_stddev=0.1,
        flows="planar",
        flow_length=2,
        entropy_weight=0.0,
        loc_init_stddev=0.1,
        scale_init=0.05,
        kl_weight=None,
        seed=None,
        **kwargs,
    ):
        reject_tfp_arguments(type(self).__name__, kwargs)
        if noise not in NOISE_SITES:
            raise ValueError(f"`noise` must be one of {NOISE_SITES}, got {noise!r}.")
        if isinstance(posterior, FlowPosterior):
            # The weight-posterior object names the same construction: a
            # Gaussian base through its flow chain (rho settings do not apply:
            # node scales start at `scale_init`).
            flows = posterior.flows
            flow_length = len(flow_names(posterior.flows, posterior.length))
            posterior = "flow"
        if posterior not in NODE_POSTERIORS:
            raise ValueError(f"`posterior` must be one of {NODE_POSTERIORS}, got {posterior!r}.")
        num_components = _positive_int("num_components", num_components)
        flow_length = _positive_int("flow_length", flow_length, minimum=0)
        prior_mean = _real("prior_mean", prior_mean)
        prior_stddev = _real("prior_stddev", prior_stddev, 0.0, strict=True)
        entropy_weight = _real("entropy_weight", entropy_weight, 0.0)
        loc_init_stddev = _real("loc_init_stddev", loc_init_stddev, 0.0)
        scale_init = _real("scale_init", scale_init, 0.0, strict=True)
        if kl_weight is not None:
            kl_weight = _real("kl_weight", kl_weight, 0.0)
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0
        ):
            raise ValueError(f"`seed` must be a non-negative int or None, got {seed!r}.")
        if isinstance(flows, (list, tuple)):
            flows = list(flows)
        flow_names(flows, flow_length)  # ValueError naming `flows`
        # Variables stay float32 inside call under mixed precision (see
        # base._float32_variables); the layer casts what enters the forward
        # pass and keeps z in the variables' dtype, the KL and the entropy in float32.
        kwargs["autocast"] = False
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        set_weight_arguments(self, activation, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer, kernel_constraint,
                             bias_constraint)
        self.noise = noise
        self.posterior = posterior
        self.num_components = num_components
        self.prior_mean = prior_mean
        self.prior_stddev = prior_stddev
        self.flows = flows
        self.flow_length = flow_length
        self.entropy_weight = entropy_weight
        self.loc_init_stddev = loc_init_stddev
        self.scale_init = scale_init
        self._initial_kl_weight = kl_weight
        self.seed = None if seed is None else int(seed)
        self.sites = ("input", "output") if noise == "both" else (noise,)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        self.kl_weight = self.add_weight(
            name="kl_weight", shape=(), dtype="float32", trainable=False,
            initializer=keras.initializers.Constant(1.0 if kl_weight is None else kl_weight),
        )
        # 1.0: inference samples z; 0.0: inference uses the posterior centres.
        self.sampling = self.add_weight(
            name="sampling", shape=(), dtype="float32", initializer="ones", trainable=False
        )
        self._create_kl_tracker()
        self._warned_unset_kl_weight = False
        # One flow per site, shared by the components, in the dtype of z.
        self.input_flow = self.output_flow = None
        if posterior == "flow" and flow_length > 0:
            for offset, site in enumerate(self.sites):
                flow = NormalizingFlow(flows=flows, length=flow_length,
                                       dtype=self.dtype_policy.variable_dtype,
                                       seed=self._seed_plus(4 + offset), name=f"{site}_flow")
                setattr(self, f"{site}_flow", flow)
        self.kernel = self.bias = None
        self.input_loc = self.input_rho = self.output_loc = self.output_rho = None

    # -- construction ---------------------------------------------------------
    def _seed_plus(self, offset):
        return None if self.seed is None else self.seed + offset

    def _build_node_layer(self, kernel_shape, bias_shape, node_counts):
        """Creates U, b and the node posteriors; node_counts maps site -> #nodes."""
        self.kernel = self.add_weight(
            name="kernel", shape=kernel_shape,
            initializer=seeded_initializer(self.kernel_initializer, self.seed),
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=bias_shape,
                initializer=seeded_initializer(self.bias_initializer, self._seed_plus(1)),
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
            )
        self.node_counts = dict(node_counts)
        for offset, site in enumerate(self.sites):
            shape = (self.num_components, node_counts[site])
            loc = self.add_weight(
                name=f"{site}_loc", shape=shape,
                initializer=keras.initializers.RandomNormal(
                    1.0, self.loc_init_stddev, seed=self._seed_plus(2 + offset)),
            )
            rho = self.add_weight(
                name=f"{site}_rho", shape=shape,
                initializer=keras.initializers.Constant(_inverse_softplus(self.scale_init)),
            )
            setattr(self, f"{site}_loc", loc)
            setattr(self, f"{site}_rho", rho)
            flow = getattr(self, f"{site}_flow")
            if flow is not None and not flow.built:
                flow.build((None, node_counts[site]))

    # -- the node draws -------------------------------------------------------
    def _components(self, rows, training):
        """Component index of each row: i mod K, or (sample index) mod K in a sample trace."""
        index = tf.range(rows)
        context = sample_context()
        if context is not None and not training:
            index = index // tf.maximum(rows // context.num_samples, 1)
        return index % self.num_components

    def _select(self, params, components):
        """Row i's component parameters [rows, nodes] (or [1, nodes] for K = 1).

        A one-hot product rather than a gather: the gradient to the [K, nodes]
        variables stays dense (a gather's IndexedSlices would hold one slice
        per row).
        """
        if self.num_components == 1:
            return params
        return tf.matmul(tf.one_hot(components, self.num_components, dtype=params.dtype), params)

    def _noise_scale(self, training):
        """None while training (full noise); at inference the `sampling` switch."""
        if training:
            return None
        if _flag("force_mean"):
            return tf.constant(0.0, self.variable_dtype)
        return tf.cast(self.sampling, self.variable_dtype)

    def _gaussian_terms(self, site):
        """Closed-form KL and entropy of the Gaussian base, averaged over components."""
        loc = tf.convert_to_tensor(getattr(self, f"{site}_loc"))
        scale = tf.nn.softplus(getattr(self, f"{site}_rho"))
        ratio = scale / self.prior_stddev
        diff = (loc - self.prior_mean) / self.prior_stddev
        kl = 0.5 * (tf.square(ratio) + tf.square(diff) - 1.0) - tf.math.log(ratio)
        entropy = _HALF_LOG_2PI_E + tf.math.log(scale)
        count = float(self.num_components)
        return tf.reduce_sum(kl) / count, tf.reduce_sum(entropy) / count

    def _site_draw(self, site, components, seed, noise_scale, training, with_kl):
        """z [rows, nodes] and, with_kl, the site's float32 (KL, entropy).

        z is drawn in the variables' dtype: float32 under mixed precision
        (the node posterior stays float32, see `__init__`), float64 for a
        float64 layer.
        """
        loc_all = tf.convert_to_tensor(getattr(self, f"{site}_loc"))
        scale_all = tf.nn.softplus(getattr(self, f"{site}_rho"))
        loc, scale = self._select(loc_all, components), self._select(scale_all, components)
        rows = tf.shape(components)[0]
        eps = noise_lib.normal(tf.stack([rows, tf.shape(loc_all)[1]]), loc_all.dtype, seed)
        sample = loc + scale * eps
        base = sample if noise_scale is None else loc + noise_scale * scale * eps
        flow = getattr(self, f"{site}_flow")
        if self.posterior == "gaussian":
            terms = self._gaussian_terms(site) if with_kl else None
            return base, _float32(terms)
        if flow is None:  # flow_length = 0: the base itself, with the Monte Carlo KL
            z, log_det, z_sample, log_det_sample = base, None, sample, None
        elif with_kl and noise_scale is not None:
            # At inference the KL needs a genuine sample even in mean mode:
            # push both through the flow at once.
            rows = tf.shape(base)[0]
            both, both_log_det = flow(tf.concat([base, sample], 0), training=training)
            z, z_sample = both[:rows], both[rows:]
            log_det, log_det_sample = both_log_det[:rows], both_log_det[rows:]
        else:
            z, log_det = flow(base, training=training)
            z_sample, log_det_sample = z, log_det
        if not with_kl:
            return z, None
        return z, _float32(self._flow_terms(site, eps, scale, z_sample, log_det_sample))

    def _flow_terms(self, site, eps, scale, z, log_det):
        """Monte Carlo KL of q_K = NF#q0 and the entropy H[q0] + E[log|det J|].

        log q0(z0) = sum(-eps^2 / 2 - log sigma - log(2 pi) / 2) with
        z0 = mu + sigma eps; the prior is taken at z = NF(z0), not at z0
        (see the module docstring for the deviation from seed 001).
        """
        log_q0 = tf.reduce_sum(-0.5 * tf.square(eps) - tf.math.log(scale) - _HALF_LOG_2PI, -1)
        standard = (z - self.prior_mean) / self.prior_stddev
        log_p = tf.reduce_sum(
            -0.5 * tf.square(standard) - math.log(self.prior_stddev) - _HALF_LOG_2PI, -1)
        per_row = log_q0 - log_p
        _, entropy = self._gaussian_terms(site)
        if log_det is not None:
            log_det = tf.cast(log_det, per_row.dtype)
            per_row = per_row - log_det
            entropy = entropy + _mean(log_det)
        return _mean(per_row), entropy

    def _node_shape(self, rank, nodes):
        """Shape that broadcasts z [rows, nodes] against a rank-`rank` tensor."""
        return [-1] + [1] * (rank - 2) + [nodes]

    # -- call -----------------------------------------------------------------
    def call(self, inputs, training=None):
        with _float32_variables():
            dtype = self.compute_dtype
            inputs = ops.cast(inputs, dtype)
            rows = tf.shape(inputs)[0]
            rank = inputs.shape.rank
            with_kl = not _flag("skip_kl")
            components = self._components(rows, training)
            noise_scale = self._noise_scale(training)
            seeds = noise_lib.call_seeds(self.seed_generator, 2)
            z, terms = {}, []
            for site in self.sites:
                seed = seeds[0 if site == "input" else 1]
                z[site], site_terms = self._site_draw(
                    site, components, seed, noise_scale, training, with_kl)
                terms.append(site_terms)
            x = inputs
            if "input" in z:
                shape = self._node_shape(rank, self.node_counts["input"])
                x = x * tf.reshape(tf.cast(z["input"], dtype), shape)
            outputs = self._apply_kernel(x, tf.cast(self.kernel, dtype))
            if self.bias is not None:
                outputs = outputs + self._shape_bias(tf.cast(self.bias, dtype))
            if "output" in z:
                shape = self._node_shape(outputs.shape.rank, self.node_counts["output"])
                outputs = outputs * tf.reshape(tf.cast(z["output"], dtype), shape)
            if with_kl:
                kl = tf.add_n([t[0] for t in terms])
                entropy = tf.add_n([t[1] for t in terms])
                self._add_kl(rows, training, kl, entropy, inputs.shape[0])
            if self.activation is not None:
                outputs = self.activation(outputs)
            return outputs

    def _add_kl(self, rows, training, kl, entropy, static_rows=None):
        """Adds kl_weight * (KL - gamma H) to the losses and to the `<name>_kl` tracker."""
        if training and self._initial_kl_weight is None and not self._warned_unset_kl_weight:
            self._warned_unset_kl_weight = True
            if not getattr(self, "_kl_weight_managed", False):
                warnings.warn(
                    f"Layer '{self.name}' trains with kl_weight=1.0 because none was "
                    "given: the per-example objective needs kl_weight = 1/N. Pass "
                    "kl_weight=1/N or use tfp_bnn.callbacks.KLScheduler(num_examples=N).",
                    stacklevel=3,
                )
        # Once per outer call; deferred out of a loop body (see kl_tracking).
        if not self._claim_kl(static_rows):
            return
        self.add_loss(self._kl_objective_penalty(kl, entropy, rows))

    def _kl_objective_penalty(self, kl, entropy, rows):
        """kl_weight * (KL - gamma H), logged in the tracker for `rows` rows."""
        objective = kl
        if self.entropy_weight:
            objective = kl - self.entropy_weight * entropy
        penalty = self.kl_weight * objective
        self._record_kl(penalty, rows)
        return penalty

    def _deferred_kl_penalty(self, rows):
        """The term of a call made inside a loop body, built after the loop from
        the weights alone: closed form for the Gaussian posterior, else a Monte
        Carlo estimate over one draw per row (at least one per component)."""
        with _float32_variables():
            kl, entropy = self._objective_terms(max(int(rows), self.num_components))
            return self._kl_objective_penalty(kl, entropy, rows)

    def _apply_kernel(self, inputs, kernel):
        raise NotImplementedError

    def _shape_bias(self, bias):
        return bias

    # -- inspection -----------------------------------------------------------
    def _check_built(self, what):
        if not self.built:
            raise ValueError(f"{type(self).__name__} '{self.name}' must be built before {what}.")

    def _check_site(self, site):
        if site not in self.sites:
            raise ValueError(
                f"`site` must be one of this layer's noise sites {self.sites}, got {site!r}."
            )

    def _check_component(self, component):
        if component is None:
            return
        if (isinstance(component, bool) or not isinstance(component, numbers.Integral)
                or not 0 <= component < self.num_components):
            raise ValueError(
                f"`component` must be None or an int in [0, {self.num_components}), "
                f"got {component!r}."
            )

    def node_posterior(self, site="input"):
        """q(z) of one site as a TFP distribution with event shape [nodes].

        The uniform mixture of the components' diagonal Gaussians, pushed
        through the site's flow (`NormalizingFlow.bijector()`, batch-norm
        steps at their moving statistics) for flow posteriors. Planar and
        Sylvester steps have no closed-form inverse, so `log_prob` of a given
        z is not available; compute log q at a base draw z0 as
        `q.distribution.log_prob(z0) - q.bijector.forward_log_det_jacobian(z0, 1)`.
        """
        self._check_built("building its posterior")
        self._check_site(site)
        loc = tf.convert_to_tensor(getattr(self, f"{site}_loc"))
        scale = tf.nn.softplus(getattr(self, f"{site}_rho"))
        base = tfd.MixtureSameFamily(
            tfd.Categorical(logits=tf.zeros([self.num_components])),
            tfd.Independent(tfd.Normal(loc, scale), reinterpreted_batch_ndims=1),
        )
        flow = getattr(self, f"{site}_flow")
        if flow is None:
            return base
        return tfd.TransformedDistribution(base, flow.bijector())

    def node_prior(self, site="input"):
        """p(z) of one site: N(prior_mean, prior_stddev^2) per node, event shape [nodes]."""
        self._check_built("building its prior")
        self._check_site(site)
        loc = tf.fill([self.node_counts[site]], self.prior_mean)
        return tfd.Independent(tfd.Normal(loc, self.prior_stddev), reinterpreted_batch_ndims=1)

    def node_posterior_samples(self, num_samples, site="input", component=0):
        """Samples of the node variables z of one site, for inspection and plots.

        Args:
            num_samples: an int >= 1.
            site: "input" or "output" (one of the layer's noise sites).
            component: the mixture component, or None for the mixture (sample
                i from component i mod K).

        Returns:
            numpy float32 array [num_samples, nodes]; always sampled (mean
            mode does not apply). Advances the layer's seed generator.
        """
        self._check_built("sampling its nodes")
        num_samples = _positive_int("num_samples", num_samples)
        self._check_site(site)
        self._check_component(component)
        if component is None:
            components = tf.range(num_samples) % self.num_components
        else:
            components = tf.fill([num_samples], int(component))
        seed = noise_lib.next_seed(self.seed_generator)
        z, _ = self._site_draw(site, components, seed, None, False, False)
        return keras.ops.convert_to_numpy(z).astype(np.float32)

    def kl_divergence(self, num_samples=1000):
        """KL(q || p) of the layer's nodes, unweighted, in nats (float32 tensor).

        Exact for the Gaussian posterior (averaged over components); for
        flows a Monte Carlo estimate over `num_samples` draws spread evenly
        over the components.
        """
        return self._objective_terms(num_samples)[0]

    def entropy(self, num_samples=1000):
        """H[q] of the layer's nodes averaged over components, in nats.

        Exact for the Gaussian posterior; H[q0] + a Monte Carlo estimate of
        E[log|det J|] over `num_samples` draws for flows.
        """
        return self._objective_terms(num_samples)[1]

    def _objective_terms(self, num_samples):
        self._check_built("computing its KL")
        num_samples = _positive_int("num_samples", num_samples)
        components = tf.range(num_samples) % self.num_components
        seeds = noise_lib.call_seeds(self.seed_generator, 2)
        kl, entropy = 0.0, 0.0
        for site in self.sites:
            seed = seeds[0 if site == "input" else 1]
            _, (site_kl, site_entropy) = self._site_draw(site, components, seed, None, False, True)
            kl, entropy = kl + site_kl, entropy + site_entropy
        return tf.convert_to_tensor(kl, "float32"), tf.convert_to_tensor(entropy, "float32")

    # -- serialization --------------------------------------------------------
    def get_config(self):
        config = super().get_config()
        config.update(weight_arguments_config(self))
        config.update(
            {
                "noise": self.noise,
                "posterior": self.posterior,
                "num_components": self.num_components,
                "prior_mean": self.prior_mean,
                "prior_stddev": self.prior_stddev,
                "flows": self.flows,
                "flow_length": self.flow_length,
                "entropy_weight": self.entropy_weight,
                "loc_init_stddev": self.loc_init_stddev,
                "scale_init": self.scale_init,
                "kl_weight": self._initial_kl_weight,
                "seed": self.seed,
            }
        )
        return config


def _float32(terms):
    """(KL, entropy) in float32, the dtype of `kl_weight` and of every layer's KL."""
    return None if terms is None else tuple(tf.cast(t, "float32") for t in terms)


def _mean(values):
    """Mean over rows; 0 for an empty batch (instead of NaN)."""
    count = tf.cast(tf.size(values), values.dtype)
    return tf.math.divide_no_nan(tf.reduce_sum(values), count)

"""The machinery the node-based Bayesian layers share (Trinh et al. 2022).

A node-based BNN keeps the weights U, b deterministic (point estimates,
ordinary Keras weights) and makes the nodes random: latent multiplicative
variables z scale the layer's inputs and/or outputs:

    f(x) = act(z_out o (U (z_in o x) + b))

`noise="input"` draws z_in (one per input feature / input channel),
`"output"` draws z_out (one per unit / output channel, applied to the
pre-activation output, shared over spatial positions), `"both"` draws both.
Every example (row of the batch) gets its own z, in training and at
inference; mean mode (`tfp_bnn.set_mean_mode`) replaces the draws at
inference by the component's centre: z = mu_k for the Gaussian, NF(mu_k)
for flows (the image of the base mean, not the mean of q; it is
deterministic, a "mean" network). Training always
samples.

Posterior of each site, a uniform mixture of K components (`num_components`):

    NodeGaussian():  z ~ N(mu_k, diag(sigma_k^2)),  sigma_k = softplus(rho_k)
    NodeFlow():      z = NF(z0), z0 ~ N(mu_k, diag(sigma_k^2))   (Rezende & Mohamed 2015)

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

    NodeGaussian:  (1/K) sum_k KL(N(mu_k, sigma_k^2) || p)        (closed form)
    NodeFlow:      (1/R) sum_i [log q0(z0_i | k_i) - log|det J(z0_i)| - log p(z_i)]

over the R rows of the batch (one draw per row, the draws of the forward
pass), z_i = NF(z0_i): the Monte Carlo KL of q_K = NF#q0 with the flow
correction log q_K(z) = log q0(z0) - log|det J(z0)| (Rezende & Mohamed
2015). The prior is taken at the transformed sample z = NF(z0), not at the
base sample z0 (which would give KL(q0 || p) instead): only then is the
estimate unbiased for KL(q_K || p). At inference in mean mode
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

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn import noise as noise_lib
from tfp_bnn._tfp_names import reject_tfp_arguments
from tfp_bnn.flows.normalizing_flow import NormalizingFlow
from tfp_bnn.flows.normalizing_flow import flow_names
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers.node._node_posterior import NodePosterior
from tfp_bnn.layers._shapes import set_weight_arguments
from tfp_bnn.layers._shapes import weight_arguments_config
from tfp_bnn.layers._stochastic import StochasticLayer
from tfp_bnn.layers._tracing import flag as _flag
from tfp_bnn.posteriors import seeded_initializer
from tfp_bnn.posteriors.node import NodeFlow
from tfp_bnn.posteriors.node import NodeGaussian
from tfp_bnn.posteriors.node import get_node_posterior

NOISE_SITES = ("input", "output", "both")


def _inverse_softplus(value: float) -> float:
    return math.log(math.expm1(value))


class NodeLayer(NodePosterior, StochasticLayer, keras.layers.Layer):
    """Base class of the node-based Bayesian layers (`NodeDense`, `NodeConv2D`).

    Args:
        activation: activation function or its name, as in
            `keras.layers.Dense` (default: linear).
        use_bias: whether the layer adds the deterministic bias b.
        kernel_initializer: initializer of the deterministic weights U.
        bias_initializer: initializer of b.
        kernel_regularizer: regularizer of U.
        bias_regularizer: regularizer of b.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on U.
        bias_constraint: constraint on b.
        noise: which nodes are random: "input", "output" or "both".
        posterior: the posterior of the nodes, an object as the variational
            layers take: `tfp_bnn.posteriors.NodeGaussian()` (diagonal
            Gaussian per component; None is this) or
            `tfp_bnn.posteriors.NodeFlow(flows, length)` (that Gaussian
            pushed through a `tfp_bnn.flows.NormalizingFlow`). The names
            "gaussian" and "flow" stand for them, as a weight posterior's
            registered name stands for it; a
            `tfp_bnn.posteriors.FlowPosterior` stands for the `NodeFlow`
            with its `flows` and `length`.
        flows: with `posterior="flow"` (the name), the flow kind(s) of its
            `NodeFlow` (default "planar"): the spelling of configs saved
            before the posterior objects. Ignored with "gaussian"; with a
            posterior object, give the flow to `NodeFlow` instead.
        flow_length: with `posterior="flow"`, the number of flow steps of its
            `NodeFlow`, an int >= 0 (default 2; 0: no flow, the Gaussian base
            with a Monte Carlo KL); as `flows` otherwise.
        num_components: K >= 1, the number of mixture components.
        prior_mean: the mean of the prior N(prior_mean, prior_stddev^2) of
            every node.
        prior_stddev: its standard deviation, > 0.
        entropy_weight: gamma >= 0; the loss gets kl_weight * (KL - gamma H[q]).
        loc_init_stddev: the posterior means start at N(1, loc_init_stddev^2).
        scale_init: the posterior standard deviations start at this value, > 0.
        kl_weight: the weight of the KL in the loss, >= 0, usually 1/N. None
            leaves it at 1.0 until a `KLScheduler` sets it (with a warning if
            training starts with it unset).
        seed: int or None; seeds the node noise and the initial weights.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: the input tensor.
        training: True always samples the nodes z; at inference z is
            sampled unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Example:
    `NodeDense` and `NodeConv2D` are the node layers; their random nodes
    and KL are shared machinery:

    >>> layer = tfp_bnn.layers.NodeDense(4, noise="both", kl_weight=1 / 100, seed=0)
    >>> outputs = layer(np.ones((2, 3), "float32"))
    >>> isinstance(layer, NodeLayer), outputs.shape, len(layer.losses)
    (True, TensorShape([2, 4]), 1)
    """

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
        posterior=None,
        flows=None,
        flow_length=None,
        num_components=1,
        prior_mean=1.0,
        prior_stddev=0.1,
        entropy_weight=0.0,
        loc_init_stddev=0.1,
        scale_init=0.05,
        kl_weight=None,
        seed=None,
        **kwargs,
    ):
        reject_tfp_arguments(type(self).__name__, kwargs)
        _validation.one_of("noise", noise, NOISE_SITES)
        posterior = _resolve_posterior(posterior, flows, flow_length)
        num_components = _validation.integer("num_components", num_components)
        prior_mean = _validation.number("prior_mean", prior_mean)
        prior_stddev = _validation.positive("prior_stddev", prior_stddev)
        entropy_weight = _validation.number("entropy_weight", entropy_weight, low=0)
        loc_init_stddev = _validation.number("loc_init_stddev", loc_init_stddev, low=0)
        scale_init = _validation.positive("scale_init", scale_init)
        # Variables stay float32 inside call under mixed precision (see
        # _mixed_precision); the layer casts what enters the forward
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
        self.entropy_weight = entropy_weight
        self.loc_init_stddev = loc_init_stddev
        self.scale_init = scale_init
        self.sites = ("input", "output") if noise == "both" else (noise,)
        self._create_stochastic_state(kl_weight, seed)
        # One flow per site, shared by the components, in the dtype of z.
        self.input_flow = self.output_flow = None
        if isinstance(posterior, NodeFlow) and posterior.length > 0:
            for offset, site in enumerate(self.sites):
                flow = NormalizingFlow(flows=posterior.flows, length=posterior.length,
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

    def _noise_dtype(self):
        # z is drawn in the variables' dtype (see `_site_draw`).
        return self.variable_dtype

    # -- call -----------------------------------------------------------------
    def call(self, inputs, training=None):
        with float32_variables():
            dtype = self.compute_dtype
            inputs = ops.cast(inputs, dtype)
            rows = ops.shape(inputs)[0]
            rank = len(inputs.shape)
            with_kl = not _flag("skip_kl")
            components = self._components(rows, training)
            noise_scale = self._noise_scale(training)
            seeds = noise_lib.call_seeds(self.seed_generator, 2)
            # The KL terms are not drawn here: the layer's KLRegularizer computes
            # them from the weights when Keras reads the losses (`_kl_tracking`).
            z = {}
            for site in self.sites:
                seed = seeds[0 if site == "input" else 1]
                z[site], _ = self._site_draw(site, components, seed, noise_scale, training,
                                             False)
            x = inputs
            if "input" in z:
                shape = self._node_shape(rank, self.node_counts["input"])
                x = x * ops.reshape(ops.cast(z["input"], dtype), shape)
            outputs = self._apply_kernel(x, ops.cast(self.kernel, dtype))
            if self.bias is not None:
                outputs = outputs + self._shape_bias(ops.cast(self.bias, dtype))
            if "output" in z:
                shape = self._node_shape(len(outputs.shape), self.node_counts["output"])
                outputs = outputs * ops.reshape(ops.cast(z["output"], dtype), shape)
            if with_kl:
                self._warn_if_kl_weight_unset(training)
                self._claim_kl(inputs.shape[0])
            if self.activation is not None:
                outputs = self.activation(outputs)
            return outputs

    def _kl_objective_penalty(self, kl, entropy, rows):
        """kl_weight * (KL - gamma H), logged in the tracker for `rows` rows."""
        objective = kl
        if self.entropy_weight:
            objective = kl - self.entropy_weight * entropy
        penalty = self.kl_weight * objective
        self._record_kl(penalty, rows)
        return penalty

    def _deferred_kl_penalty(self, rows):
        """kl_weight * (KL - gamma H) from the weights alone, as the layer's
        `KLRegularizer` adds it: closed form for the Gaussian posterior, else a
        Monte Carlo estimate over max(rows, components) fresh draws."""
        with float32_variables():
            kl, entropy = self._objective_terms(max(int(rows), self.num_components))
            return self._kl_objective_penalty(kl, entropy, rows)

    def _apply_kernel(self, inputs, kernel):
        raise NotImplementedError

    def _shape_bias(self, bias):
        return bias

    # -- inspection -----------------------------------------------------------
    # -- serialization --------------------------------------------------------
    def get_config(self):
        config = super().get_config()
        config.update(weight_arguments_config(self))
        config.update(
            {
                "noise": self.noise,
                "posterior": keras.saving.serialize_keras_object(self.posterior),
                "num_components": self.num_components,
                "prior_mean": self.prior_mean,
                "prior_stddev": self.prior_stddev,
                "entropy_weight": self.entropy_weight,
                "loc_init_stddev": self.loc_init_stddev,
                "scale_init": self.scale_init,
                "kl_weight": self._initial_kl_weight,
                "seed": self.seed,
            }
        )
        return config


def _resolve_posterior(posterior, flows, flow_length):
    """The node posterior that `posterior` says (with the name "flow": and `flows`, `flow_length`).

    Configs saved before the posterior objects hold `posterior="gaussian"` or
    "flow" with `flows` and `flow_length` beside it, always both (defaults
    "planar" and 2); they load through this.
    """
    if flow_length is not None:
        flow_length = _validation.integer("flow_length", flow_length, minimum=0)
    if flows is not None:
        flows = list(flows) if isinstance(flows, (list, tuple)) else flows
        flow_names(flows, flow_length)  # ValueError naming `flows`
    given = flows is not None or flow_length is not None
    if isinstance(posterior, str) and posterior == "flow":
        return NodeFlow("planar" if flows is None else flows,
                        2 if flow_length is None else flow_length)
    resolved = get_node_posterior(posterior)
    if given and not (isinstance(posterior, str) or isinstance(resolved, NodeGaussian)):
        raise ValueError(
            f"`flows` and `flow_length` go with posterior=\"flow\"; {resolved!r} holds its "
            f"own flow. Got flows={flows!r}, flow_length={flow_length!r}."
        )
    return resolved


"""The posterior of a node-based layer's random nodes z, its draws and its KL.

Per site ("input" / "output"), a uniform mixture of K components: a diagonal
Gaussian N(mu_k, sigma_k^2), sigma_k = softplus(rho_k), optionally pushed
through one normalizing flow shared by the components; the prior is
N(prior_mean, prior_stddev^2) per node. `tfp_bnn.layers.node.node_base` states
the model, the component assignment and the KL estimator (Trinh et al. 2022).
"""

import math

import keras
import numpy as np
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn._substrate import tfp
from tfp_bnn._tf import tf
from tfp_bnn import noise as noise_lib
from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.posteriors.node import NodeGaussian

tfd = tfp.distributions

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_2PI_E = 0.5 * math.log(2.0 * math.pi * math.e)


class NodePosterior:
    """Mixin of `NodeLayer`: draws z per row and computes the KL and entropy terms.

    Expects the attributes `NodeLayer` sets: `sites`, `num_components`,
    `prior_mean`, `prior_stddev`, `posterior`, `node_counts`, the
    `<site>_loc`, `<site>_rho` variables and `<site>_flow` layers.
    """

    # -- the node draws -------------------------------------------------------
    def _components(self, rows, training):
        """Component index of each row: i mod K, or (sample index) mod K in a sample trace."""
        index = ops.arange(rows)
        context = sample_context()
        if context is not None and not training:
            index = index // ops.maximum(rows // context.num_samples, 1)
            if _backend.is_jax():  # one mapped call per sample group
                index = index + context.first_sample
        return index % self.num_components

    def _select(self, params, components):
        """Row i's component parameters [rows, nodes] (or [1, nodes] for K = 1).

        A one-hot product rather than a gather: the gradient to the [K, nodes]
        variables stays dense (a gather's IndexedSlices would hold one slice
        per row).
        """
        if self.num_components == 1:
            return params
        return ops.matmul(ops.one_hot(components, self.num_components, dtype=params.dtype), params)

    def _gaussian_terms(self, site):
        """Closed-form KL and entropy of the Gaussian base, averaged over components."""
        loc = _read(getattr(self, f"{site}_loc"))
        scale = ops.softplus(_read(getattr(self, f"{site}_rho")))
        ratio = scale / self.prior_stddev
        diff = (loc - self.prior_mean) / self.prior_stddev
        kl = 0.5 * (ops.square(ratio) + ops.square(diff) - 1.0) - ops.log(ratio)
        entropy = _HALF_LOG_2PI_E + ops.log(scale)
        count = float(self.num_components)
        return ops.sum(kl) / count, ops.sum(entropy) / count

    def _site_draw(self, site, components, seed, noise_scale, training, with_kl):
        """z [rows, nodes] and, with_kl, the site's float32 (KL, entropy).

        z is drawn in the variables' dtype: float32 under mixed precision
        (the node posterior stays float32, see `__init__`), float64 for a
        float64 layer.
        """
        loc_all = _read(getattr(self, f"{site}_loc"))
        scale_all = ops.softplus(_read(getattr(self, f"{site}_rho")))
        loc, scale = self._select(loc_all, components), self._select(scale_all, components)
        eps = noise_lib.normal(_draw_shape(components, loc_all.shape[1]), loc_all.dtype, seed)
        sample = loc + scale * eps
        base = sample if noise_scale is None else loc + noise_scale * scale * eps
        flow = getattr(self, f"{site}_flow")
        if isinstance(self.posterior, NodeGaussian):
            terms = self._gaussian_terms(site) if with_kl else None
            return base, _float32(terms)
        if flow is None:  # flow_length = 0: the base itself, with the Monte Carlo KL
            z, log_det, z_sample, log_det_sample = base, None, sample, None
        elif with_kl and noise_scale is not None:
            # At inference the KL needs a genuine sample even in mean mode:
            # push both through the flow at once.
            rows = ops.shape(base)[0]
            both, both_log_det = flow(ops.concatenate([base, sample], 0), training=training)
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
        (`tfp_bnn.layers.node.node_base` says why).
        """
        log_q0 = ops.sum(-0.5 * ops.square(eps) - ops.log(scale) - _HALF_LOG_2PI, -1)
        standard = (z - self.prior_mean) / self.prior_stddev
        log_p = ops.sum(
            -0.5 * ops.square(standard) - math.log(self.prior_stddev) - _HALF_LOG_2PI, -1)
        per_row = log_q0 - log_p
        _, entropy = self._gaussian_terms(site)
        if log_det is not None:
            log_det = ops.cast(log_det, per_row.dtype)
            per_row = per_row - log_det
            entropy = entropy + _mean(log_det)
        return _mean(per_row), entropy

    def _node_shape(self, rank, nodes):
        """Shape that broadcasts z [rows, nodes] against a rank-`rank` tensor."""
        return [-1] + [1] * (rank - 2) + [nodes]


    # -- inspection -----------------------------------------------------------
    def _check_built(self, what):
        if not self.built:
            raise ValueError(f"{type(self).__name__} '{self.name}' must be built before {what}.")

    def _check_site(self, site):
        # Not `_validation.one_of`: the message names this layer's sites as a tuple.
        if site not in self.sites:
            raise ValueError(
                f"`site` must be one of this layer's noise sites {self.sites}, got {site!r}."
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
        loc = _read(getattr(self, f"{site}_loc"))
        scale = ops.softplus(_read(getattr(self, f"{site}_rho")))
        base = tfd.MixtureSameFamily(
            tfd.Categorical(logits=ops.zeros([self.num_components])),
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
        loc = ops.full([self.node_counts[site]], self.prior_mean)
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
        num_samples = _validation.integer("num_samples", num_samples)
        self._check_site(site)
        component = _validation.integer("component", component, minimum=0,
                                        maximum=self.num_components - 1, allow_none=True)
        if component is None:
            components = ops.arange(num_samples) % self.num_components
        else:
            components = ops.full([num_samples], component, dtype="int32")
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
        num_samples = _validation.integer("num_samples", num_samples)
        components = ops.arange(num_samples) % self.num_components
        seeds = noise_lib.call_seeds(self.seed_generator, 2)
        kl, entropy = 0.0, 0.0
        for site in self.sites:
            seed = seeds[0 if site == "input" else 1]
            _, (site_kl, site_entropy) = self._site_draw(site, components, seed, None, False, True)
            kl, entropy = kl + site_kl, entropy + site_entropy
        return ops.convert_to_tensor(kl, "float32"), ops.convert_to_tensor(entropy, "float32")


def _read(variable):
    """The variable's value at its own dtype. Inside `float32_variables` (an
    autocast scope without a dtype) Keras reports a variable's `dtype`, and
    converts it, as floatx; its `value` keeps the dtype it has."""
    return ops.convert_to_tensor(variable.value)


def _float32(terms):
    """(KL, entropy) in float32, the dtype of `kl_weight` and of every layer's KL."""
    return None if terms is None else tuple(ops.cast(t, "float32") for t in terms)


def _mean(values):
    """Mean over rows; 0 for an empty batch (instead of NaN)."""
    count = ops.cast(ops.size(values), values.dtype)
    return ops.divide_no_nan(ops.sum(values), count)


def _draw_shape(components, nodes):
    """The shape [rows, nodes] of a site's noise: one Shape op on TensorFlow
    (the batch may be dynamic), the static tuple JAX draws take."""
    if _backend.is_jax():
        return (components.shape[0], nodes)
    return tf.stack([tf.shape(components)[0], nodes])

"""The flow posterior: a diagonal Gaussian pushed through a normalizing flow.

Registered in `tfp_bnn.posteriors` as "flow" and importable from there.
"""

import collections
import math
import weakref

import keras
from tfp_bnn._tf import tf
from tfp_bnn._substrate import tfp

from tfp_bnn import _validation as check
from tfp_bnn import noise
from tfp_bnn.flows import normalizing_flow as flows_lib
from tfp_bnn.posteriors.mean_field import MeanFieldNormal
from tfp_bnn.posteriors.base import Posterior
from tfp_bnn.posteriors.base import PosteriorDraw

tfd = tfp.distributions

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# The flow of each FlowPosterior's weight tensor, by id of its `loc` variable.
# A posterior's parameters must be variables only (layers take gradients with
# respect to them), and Keras rebuilds the tuple that `build` returns, so the
# flow cannot travel with it; the layer holds it (as `<name>_flow`) and this
# weak map finds it again. An entry dies with its flow, i.e. with the layer.
_FLOWS = weakref.WeakValueDictionary()

FlowPrepared = collections.namedtuple("FlowPrepared", ["loc", "scale", "flow", "mean"])


@keras.saving.register_keras_serializable(package="tfp_bnn")
class FlowPosterior(Posterior):
    """A diagonal Gaussian pushed through a normalizing flow (Rezende & Mohamed 2015).

    The weight tensor is flattened to a vector of D elements, z0 ~
    N(loc, diag(softplus(rho)^2)) is drawn as in `MeanFieldNormal`, and the
    weights are w = reshape(NF(z0)) with NF a `tfp_bnn.flows.NormalizingFlow`
    of `length` steps. The density follows from the change of variables:

        log q(w) = log N(z0; loc, sigma) - sum_k log|det J_k|.

    There is no closed-form KL: layers use the Monte Carlo estimate
    log q(w) - log p(w) at the weights of the forward pass (with
    kl_estimator "auto" or "mc"; "analytic" is refused). The flow is not
    location-scale, so Flipout and local reparameterization cannot use it;
    `DenseReparameterization` and `Conv2DReparameterization` can.

    `build` adds `loc` and `rho` (shaped like the weights, initialised as in
    `MeanFieldNormal`) to the layer, and a `NormalizingFlow` sublayer as the
    layer's attribute `<name>_flow` (e.g. `layer.kernel_flow`), so every
    parameter trains with `fit` and is saved with the model. The parameters
    `build` returns are loc, rho and the flow's trainable variables.

    The flow is always applied in inference mode: there is one weight sample
    per step, no batch to normalise over, so a "batch_norm" step acts as a
    learned element-wise affine map (its moving statistics stay at 0 and 1).

    Mean mode uses NF(loc), the flow image of the base mean. That is the
    posterior's centre, not its exact mean (E[NF(z0)] != NF(E[z0]) for a
    nonlinear flow).

    Args:
        flows: a flow name from `tfp_bnn.flows.FLOWS` or a list of them.
        length: the number of flow steps, an int >= 0 (0: `MeanFieldNormal`
            with a Monte Carlo KL); a list of names is repeated cyclically.
        rho_init: mean of the initial rho of the Gaussian base, as in
            `MeanFieldNormal`.
        rho_init_stddev: spread of the initial rho values, >= 0.
        sylvester_rank: columns of Q in Sylvester steps (see
            `NormalizingFlow`); None for min(D, 16).

    Example:
    >>> layer = tfp_bnn.layers.DenseReparameterization(
    ...     8, posterior=FlowPosterior(flows="planar", length=4), kl_weight=1 / 1000)
    >>> layer(np.ones((2, 3), "float32")).shape
    TensorShape([2, 8])
    """

    is_location_scale = False

    def __init__(self, flows="planar", length=2, rho_init=-3.0, rho_init_stddev=0.1,
                 sylvester_rank=None):
        flows_lib.flow_names(flows, length)  # validates both, names them in the error
        self.flows = flows if isinstance(flows, str) else list(flows)
        self.length = None if length is None else int(length)
        self.sylvester_rank = check.integer("sylvester_rank", sylvester_rank, allow_none=True)
        self._base = MeanFieldNormal(rho_init, rho_init_stddev)

    def build(self, layer, name, shape, loc_initializer="glorot_uniform",
              regularizer=None, constraint=None, seed=None):
        if getattr(layer, "kl_estimator", None) == "analytic":
            raise ValueError(
                f"`kl_estimator`='analytic' needs a closed-form KL; {self!r} has none "
                "(its KL is a Monte Carlo estimate). Use kl_estimator='mc' or 'auto'."
            )
        loc, rho = self._base.build(layer, name, shape, loc_initializer=loc_initializer,
                                    regularizer=regularizer, constraint=constraint, seed=seed)
        flow = flows_lib.NormalizingFlow(
            flows=self.flows, length=self.length, sylvester_rank=self.sylvester_rank,
            seed=None if seed is None else int(seed) + 4, dtype="float32",
            name=f"{name}_flow",
        )
        flow.build((None, math.prod(shape)))
        setattr(layer, f"{name}_flow", flow)
        _FLOWS[id(loc)] = flow
        return (loc, rho) + tuple(flow.trainable_variables)

    def _push(self, flow, loc, z0):
        """Weights [N, *shape] and log|det J| [N] for base draws z0 [N, D]."""
        y, log_det = flow(z0, training=False)
        return tf.reshape(y, [-1] + list(loc.shape)), log_det

    def _prepare(self, params, mean=None):
        loc, rho = tf.convert_to_tensor(params[0]), params[1]
        return FlowPrepared(loc, tf.nn.softplus(rho), _FLOWS[id(params[0])], mean)

    def prepare(self, params):
        """(loc, scale, flow, mean) with mean = NF(loc), reshaped like the weights.

        Args:
            params: the variables `build` returned.

        Returns:
            A named tuple (loc, scale, flow, mean).
        """
        prepared = self._prepare(params)
        mean, _ = self._push(prepared.flow, prepared.loc, tf.reshape(prepared.loc, [1, -1]))
        return prepared._replace(mean=mean[0])

    def distribution(self, prepared):
        """q(w) as a `tfd.TransformedDistribution` (event shape = weight shape).

        It samples; its `log_prob` needs an inverse, which planar and Sylvester
        steps do not have in closed form.

        Args:
            prepared: what `prepare` returned.

        Returns:
            A `tfd.TransformedDistribution`.
        """
        loc, scale, flow, _ = prepared
        base = tfd.MultivariateNormalDiag(tf.reshape(loc, [-1]), tf.reshape(scale, [-1]))
        reshape = tfp.bijectors.Reshape(event_shape_out=tuple(loc.shape),
                                        event_shape_in=(math.prod(loc.shape),))
        return tfd.TransformedDistribution(
            base, tfp.bijectors.Chain([reshape, flow.bijector(training=False)])
        )

    def mean(self, prepared):
        """NF(loc): the flow image of the base mean (not the exact mean).

        Args:
            prepared: what `prepare` returned.

        Returns:
            A float32 tensor in the weight shape.
        """
        return prepared.mean

    def _eps(self, prepared, sample_shape, seed):
        return noise.normal(tuple(sample_shape) + (math.prod(prepared.loc.shape),),
                            "float32", seed)

    def sample(self, prepared, seed, dtype, noise_scale):
        return self.sample_n(prepared, 1, seed, dtype, noise_scale)[0]

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        """[S, *shape]: the flow maps the S base draws in one call.

        Args:
            prepared: what `prepare` returned.
            num_samples: S, an int.
            seed: an int32 seed pair, shape [2].
            dtype: the dtype of the samples.
            noise_scale: scalar multiplying the noise (0 gives the mean).

        Returns:
            A tensor [num_samples, *weight shape] in `dtype`.
        """
        loc, scale, flow, _ = prepared
        eps = self._eps(prepared, (num_samples,), seed) * tf.cast(noise_scale, "float32")
        z0 = tf.reshape(loc, [1, -1]) + tf.reshape(scale, [1, -1]) * eps
        weights, _ = self._push(flow, loc, z0)
        return tf.cast(weights, dtype)

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        """A sample with its log-density; the KL is left to the layer's Monte Carlo estimate.

        The posterior always draws (whatever `with_noise` and `prior` say):
        without a closed-form KL, even `kl_divergence()` needs a sample. A
        `None` seed (the layer's analytic path) uses the fixed seed (0, 0).

        Args:
            params: the variables `build` returned.
            seed: an int32 seed pair (shape [2]) for the noise, or None without noise.
            dtype: the layer's compute dtype, for the perturbation.
            prior: a prior to take the closed-form KL to, or None.
            with_noise: False skips the perturbation (it is then None).

        Returns:
            `PosteriorDraw(prepared, perturbation, None, log_prob)`: the KL is
            left to the layer.
        """
        prepared = self._prepare(params)
        loc, scale, flow, _ = prepared
        if seed is None:
            seed = tf.zeros([2], tf.int32)
        eps = self._eps(prepared, (), seed)
        flat_loc, flat_scale = tf.reshape(loc, [-1]), tf.reshape(scale, [-1])
        # NF(loc) and NF(z0) in one call.
        both, log_det = self._push(flow, loc, tf.stack([flat_loc, flat_loc + flat_scale * eps]))
        mean, sample = both[0], both[1]
        log_q0 = tf.reduce_sum(-0.5 * tf.square(eps) - tf.math.log(flat_scale)) - (
            _HALF_LOG_2PI * tf.cast(tf.size(eps), "float32"))
        # The difference in float32, then cast: under mixed precision the
        # difference of the two float16-rounded weights would keep only the
        # bits of the perturbation above the weight's float16 resolution, and
        # the Monte Carlo KL takes log p at mean + perturbation.
        perturbation = tf.cast(sample - mean, dtype)
        return PosteriorDraw(prepared._replace(mean=mean), perturbation, None,
                             log_q0 - log_det[1])

    def get_config(self):
        return {
            "flows": self.flows if isinstance(self.flows, str) else list(self.flows),
            "length": self.length,
            "rho_init": self._base.rho_init,
            "rho_init_stddev": self._base.rho_init_stddev,
            "sylvester_rank": self.sylvester_rank,
        }

"""The flow posterior: a diagonal Gaussian pushed through a normalizing flow.

Registered in `tfp_bnn.posteriors` as "flow" and importable from there.
"""

import collections
import math

import keras
from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn import _variables
from tfp_bnn import noise
from tfp_bnn._substrate import tfp
from tfp_bnn.flows import normalizing_flow as flows_lib
from tfp_bnn.posteriors.base import Posterior
from tfp_bnn.posteriors.base import PosteriorDraw
from tfp_bnn.posteriors.mean_field import MeanFieldNormal

tfd = tfp.distributions

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# The batch-norm step's statistics, after the trainable parameters in `build`'s tuple.
_MOVING_STATISTICS = ("moving_mean", "moving_variance")

# `steps`: (kind, parameter values) of the flow's steps, in application order.
FlowPrepared = collections.namedtuple("FlowPrepared",
                                      ["loc", "scale", "steps", "mean", "flow_name"])


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
    `build` returns are loc, rho, the flow's trainable variables and the
    moving statistics of its batch-norm steps: the posterior computes from
    them alone, as the other posteriors do.

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
        # Validates both, names them in the error.
        self._step_names = flows_lib.flow_names(flows, length)
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
        # The flow's trainable variables step by step, in `STEP_PARAMETERS` order, then
        # the moving statistics of its batch-norm steps: `_steps` rebuilds the chain
        # from them alone.
        steps = list(zip(flow.step_names, flow.steps))
        return (loc, rho) + tuple(
            step[key] for kind, step in steps for key in flows_lib.STEP_PARAMETERS[kind]) + tuple(
            step[key] for kind, step in steps if kind == "batch_norm"
            for key in _MOVING_STATISTICS)

    def _steps(self, flow_params):
        """(kind, parameter values) of each step, for `flows_lib.step_bijector`.

        A pure function of the parameters, like every posterior's: the
        posterior keeps no link to the layer or its flow, so a traced step
        (TensorFlow's or JAX's) sees whatever values it is given.
        """
        trainable = moving = 0
        moving_start = sum(len(flows_lib.STEP_PARAMETERS[kind]) for kind in self._step_names)
        steps = []
        for kind in self._step_names:
            keys = flows_lib.STEP_PARAMETERS[kind]
            params = list(zip(keys, flow_params[trainable:trainable + len(keys)]))
            trainable += len(keys)
            if kind == "batch_norm":
                start = moving_start + moving
                params += zip(_MOVING_STATISTICS, flow_params[start:start + 2])
                moving += 2
            # `.value`, as the flow layer reads its variables (the same graph on TensorFlow).
            steps.append((kind, {key: ops.cast(param.value, "float32") for key, param in params}))
        return steps

    @staticmethod
    def _push(prepared, z0):
        """Weights [N, *shape] and log|det J| [N] for base draws z0 [N, D].

        As the flow layer computes them: each step's bijector made where it is
        applied, inside the layer's name scope (TensorFlow's graph optimizer
        orders some sums by name, so the names keep its float results).
        """
        steps = prepared.steps
        with keras.name_scope(prepared.flow_name):
            y, log_det = flows_lib.forward(lambda k, z: flows_lib.step_bijector(*steps[k]),
                                           len(steps), z0)
        return ops.reshape(y, [-1] + list(prepared.loc.shape)), log_det

    def _prepare(self, params, mean=None):
        loc, rho = _variables.read(params[0]), params[1]
        # `build`'s names: "<name>_loc" and the flow layer "<name>_flow".
        flow_name = getattr(params[0], "name", "").removesuffix("_loc") + "_flow"
        return FlowPrepared(loc, ops.softplus(rho), self._steps(params[2:]), mean, flow_name)

    def prepare(self, params):
        """(loc, scale, steps, mean, flow_name) with mean = NF(loc), reshaped like the weights.

        Args:
            params: the variables `build` returned.

        Returns:
            A named tuple (loc, scale, steps, mean, flow_name).
        """
        prepared = self._prepare(params)
        mean, _ = self._push(prepared, ops.reshape(prepared.loc, [1, -1]))
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
        loc, scale, steps, _, _ = prepared
        base = tfd.MultivariateNormalDiag(ops.reshape(loc, [-1]), ops.reshape(scale, [-1]))
        reshape = tfp.bijectors.Reshape(event_shape_out=tuple(loc.shape),
                                        event_shape_in=(math.prod(loc.shape),))
        # tfb.Chain applies its list last to first.
        flow = tfp.bijectors.Chain([flows_lib.step_bijector(*step) for step in reversed(steps)],
                                   name="normalizing_flow")
        return tfd.TransformedDistribution(base, tfp.bijectors.Chain([reshape, flow]))

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
        loc, scale = prepared.loc, prepared.scale
        eps = self._eps(prepared, (num_samples,), seed) * ops.cast(noise_scale, "float32")
        z0 = ops.reshape(loc, [1, -1]) + ops.reshape(scale, [1, -1]) * eps
        weights, _ = self._push(prepared, z0)
        return ops.cast(weights, dtype)

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        """A sample with its log-density; the KL is left to the layer's Monte Carlo estimate.

        The posterior always draws (whatever `with_noise` and `prior` say):
        without a closed-form KL, even `kl_divergence()` needs a sample. A
        `None` seed (the layer's analytic path) uses a fixed seed.

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
        loc, scale = prepared.loc, prepared.scale
        if seed is None:
            seed = noise.zero_seed()
        eps = self._eps(prepared, (), seed)
        flat_loc, flat_scale = ops.reshape(loc, [-1]), ops.reshape(scale, [-1])
        # NF(loc) and NF(z0) in one call.
        both, log_det = self._push(prepared,
                                   ops.stack([flat_loc, flat_loc + flat_scale * eps]))
        mean, sample = both[0], both[1]
        log_q0 = ops.sum(-0.5 * ops.square(eps) - ops.log(flat_scale)) - (
            _HALF_LOG_2PI * ops.cast(math.prod(loc.shape), "float32"))
        # The difference in float32, then cast: under mixed precision the
        # difference of the two float16-rounded weights would keep only the
        # bits of the perturbation above the weight's float16 resolution, and
        # the Monte Carlo KL takes log p at mean + perturbation.
        perturbation = ops.cast(sample - mean, dtype)
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

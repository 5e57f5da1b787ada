"""The Keras layer that owns the parameters of a chain of flows."""

import functools

import keras
import numpy as np
from keras import ops
from tfp_bnn._substrate import tfp

from tfp_bnn import _validation as check
from tfp_bnn.flows import _common
from tfp_bnn.flows.batch_norm import BatchNormFlow
from tfp_bnn.flows.planar import Planar
from tfp_bnn.flows.radial import Radial
from tfp_bnn.flows.sylvester import Sylvester

tfb = tfp.bijectors

FLOWS = ("planar", "radial", "sylvester", "batch_norm")

# Sylvester steps use min(D, this) Householder columns unless told otherwise:
# Q costs O(D M^2) per call and M * D parameters.
DEFAULT_SYLVESTER_RANK = 16

# The trainable parameters of each kind of step, in the order `build` creates
# them; a "batch_norm" step also has its moving "moving_mean" and
# "moving_variance" (not trained).
STEP_PARAMETERS = {
    "planar": ("w", "u", "b"),
    "radial": ("z0", "alpha_raw", "beta_raw"),
    "sylvester": ("householder", "r_raw", "r_tilde_raw", "b"),
    "batch_norm": ("log_scale", "shift"),
}

# Added to the variance of a "batch_norm" step.
DEFAULT_EPSILON = 1e-3

# Spread of the random part of the initial values: every step starts close to
# (not exactly at) the identity, so that every parameter gets a gradient at
# the first step.
_INIT_STDDEV = 0.01


def flow_names(flows, length=None):
    """The list of step names that `flows` and `length` describe.

    Args:
        flows: a name from `FLOWS`, or a list of names.
        length: None (one step for a name, the list as it is) or an int >= 0,
            the number of steps; a list is repeated cyclically to fill them.

    Raises:
        ValueError naming `flows` or `length`.
    """
    length = check.integer("length", length, minimum=0, allow_none=True)
    if isinstance(flows, str):
        flows = [flows]
    elif isinstance(flows, (list, tuple)) and all(isinstance(f, str) for f in flows):
        flows = list(flows)
    else:
        raise ValueError(
            f"`flows` must be one of {FLOWS} or a list of them, got {flows!r}."
        )
    unknown = [f for f in flows if f not in FLOWS]
    if unknown:
        raise ValueError(f"Unknown `flows` {unknown!r}; expected names from {FLOWS}.")
    if length is None:
        return flows
    if length > 0 and not flows:
        raise ValueError(f"`flows` is empty but `length`={length}: no step to repeat.")
    return [flows[k % len(flows)] for k in range(length)]


def step_bijector(name, value, epsilon=DEFAULT_EPSILON):
    """The bijector of one step of kind `name` from its parameter values.

    Args:
        name: a name from `FLOWS`.
        value: dict from the names in `STEP_PARAMETERS[name]` to tensors
            (for "batch_norm" also "moving_mean" and "moving_variance", the
            statistics to normalise with).
        epsilon: added to a batch-norm step's variance.

    Returns:
        A `Planar`, `Radial`, `Sylvester` or `BatchNormFlow`.
    """
    if name == "planar":
        return Planar(value["w"], value["u"], value["b"])
    if name == "radial":
        return Radial(value["z0"], value["alpha_raw"], value["beta_raw"])
    if name == "sylvester":
        return Sylvester(value["householder"], value["r_raw"], value["r_tilde_raw"], value["b"])
    return BatchNormFlow(value["moving_mean"], value["moving_variance"], value["log_scale"],
                         value["shift"], epsilon=epsilon)


def forward(bijector_of, num_steps, z):
    """z_K and sum_k log|det J_k|, [...] for z [..., D], through `num_steps` steps.

    Args:
        bijector_of: function (k, z_k) -> the bijector of step k at its input z_k.
        num_steps: K.
        z: the input z_0.

    Returns:
        `(z_K, log_det)`.
    """
    log_det = ops.zeros(ops.shape(z)[:-1], z.dtype)
    for k in range(num_steps):
        step = bijector_of(k, z)
        log_det = log_det + step.forward_log_det_jacobian(z, event_ndims=1)
        z = step.forward(z)
    return z, log_det


class _PlanarUInitializer(keras.initializers.Initializer):
    """u = log(e - 1) w / ||w||^2 + N(0, stddev^2): u_hat ~ noise, a near-identity step.

    With w^T u = log(e - 1), m(w^T u) = 0 and u_hat is the part of u
    orthogonal to w; the noise keeps it small but nonzero.
    """

    def __init__(self, w, stddev, seed):
        self.w = w
        self.noise = keras.initializers.RandomNormal(stddev=stddev, seed=seed)

    def __call__(self, shape, dtype=None):
        w = keras.ops.convert_to_tensor(self.w, dtype=dtype)
        fixed_point = _common.LOG_E_MINUS_1 * w / keras.ops.sum(keras.ops.square(w))
        return fixed_point + self.noise(shape, dtype=dtype)


class _DiagonalShift(keras.initializers.Initializer):
    """`base` plus `shift` on the diagonal of a square matrix."""

    def __init__(self, shift, base):
        self.shift = shift
        self.base = base

    def __call__(self, shape, dtype=None):
        eye = keras.ops.eye(shape[0], dtype=dtype)
        return self.base(shape, dtype=dtype) + self.shift * eye


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NormalizingFlow(keras.layers.Layer):
    """A chain of K normalizing-flow steps with trainable parameters.

    Maps z_0 of shape [..., D] to z_K = f_K o ... o f_1(z_0) and returns the
    summed log-determinant, so that (Rezende & Mohamed 2015)

        log q_K(z_K) = log q_0(z_0) - sum_k log|det J_k(z_{k-1})|.

    Every step starts near the identity. The steps are the bijectors of
    `tfp_bnn.flows` (`Planar`, `Radial`, `Sylvester`, `BatchNormFlow`); this
    layer owns their variables, so they train with `fit` and are saved with
    the model.

    A "batch_norm" step normalizes with the batch statistics over all leading
    axes in training (and updates its moving mean and variance, momentum
    `momentum`), and with the moving statistics at inference.

    Args:
        flows: a name from `FLOWS` ("planar", "radial", "sylvester",
            "batch_norm"), or a list of names.
        length: the number of steps, an int >= 0 (0: the identity). None
            means one step for a name, the list as it is for a list; a list
            with a length is repeated cyclically to `length` steps.
        sylvester_rank: M, the number of orthonormal columns of a Sylvester
            step, 1 <= M <= D; None uses min(D, 16).
        momentum: of the batch-norm moving statistics, in [0, 1).
        epsilon: added to the batch-norm variance, > 0.
        seed: int or None; seeds the initial parameters.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        z: tensor [..., D].
        training: batch-norm steps use batch statistics when True.

    Returns:
        `(y, log_det)`: y of the shape of z and log_det of shape z.shape[:-1].

    Example:
    >>> flow = NormalizingFlow(flows="planar", length=4, seed=0)
    >>> y, log_det = flow(keras.random.normal((8, 3), seed=1))
    >>> y.shape, log_det.shape
    (TensorShape([8, 3]), TensorShape([8]))
    """

    def __init__(self, flows="planar", length=None, sylvester_rank=None, momentum=0.99,
                 epsilon=DEFAULT_EPSILON, seed=None, **kwargs):
        names = flow_names(flows, length)
        sylvester_rank = check.integer("sylvester_rank", sylvester_rank, allow_none=True)
        momentum = check.number("momentum", momentum, low=0.0, high=1.0, high_open=True)
        epsilon = check.positive("epsilon", epsilon)
        seed = check.seed(seed, allow_none=True)
        super().__init__(**kwargs)
        self.flows = flows if isinstance(flows, str) else list(flows)
        self.length = None if length is None else int(length)
        self.step_names = names  # the resolved list of steps, in application order
        self.sylvester_rank = sylvester_rank
        self.momentum = momentum
        self.epsilon = epsilon
        self.seed = seed
        self.steps = []  # one dict of variables per step

    # -- construction ---------------------------------------------------------
    def _seed(self, step, index):
        """A distinct, reproducible initializer seed per (step, variable)."""
        if self.seed is None:
            return None
        return int(np.random.SeedSequence([self.seed, step, index]).generate_state(1)[0] >> 1)

    def _normal(self, stddev, step, index, mean=0.0):
        return keras.initializers.RandomNormal(mean=mean, stddev=stddev,
                                               seed=self._seed(step, index))

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim is None:
            raise ValueError(
                f"NormalizingFlow needs a known last input dimension, got {tuple(input_shape)}."
            )
        dim = int(dim)
        rank = self.sylvester_rank
        if "sylvester" in self.step_names:
            if rank is None:
                rank = min(dim, DEFAULT_SYLVESTER_RANK)
            elif rank > dim:
                raise ValueError(
                    f"`sylvester_rank` must be <= the event size D={dim}, got {rank}."
                )
        self.steps = []
        for k, name in enumerate(self.step_names):
            build_step = getattr(self, f"_build_{name}")
            self.steps.append(build_step(k, dim, rank))

    def _weight(self, k, name, shape, initializer, trainable=True):
        return self.add_weight(name=f"{k}_{name}", shape=shape, initializer=initializer,
                               trainable=trainable)

    def _build_planar(self, k, dim, rank):
        w = self._weight(k, "planar_w", (dim,), self._normal(dim ** -0.5, k, 0))
        u = self._weight(k, "planar_u", (dim,),
                         _PlanarUInitializer(w, _INIT_STDDEV, self._seed(k, 1)))
        b = self._weight(k, "planar_b", (), "zeros")
        return {"w": w, "u": u, "b": b}

    def _build_radial(self, k, dim, rank):
        # alpha_raw = 0 and beta_raw = 0 give beta = 0: the identity.
        z0 = self._weight(k, "radial_z0", (dim,), self._normal(_INIT_STDDEV, k, 0))
        alpha_raw = self._weight(k, "radial_alpha_raw", (), "zeros")
        beta_raw = self._weight(k, "radial_beta_raw", (), self._normal(_INIT_STDDEV, k, 1))
        return {"z0": z0, "alpha_raw": alpha_raw, "beta_raw": beta_raw}

    def _build_sylvester(self, k, dim, rank):
        householder = self._weight(k, "sylvester_householder", (rank, dim),
                                   self._normal(1.0, k, 0))
        # diag(r_raw) near log(e - 1) gives r_ii = m(.) ~ 0: R ~ 0, near the identity.
        r_raw = self._weight(k, "sylvester_r_raw", (rank, rank),
                             _DiagonalShift(_common.LOG_E_MINUS_1,
                                            self._normal(_INIT_STDDEV, k, 1)))
        r_tilde_raw = self._weight(k, "sylvester_r_tilde_raw", (rank, rank),
                                   self._normal(_INIT_STDDEV, k, 2))
        b = self._weight(k, "sylvester_b", (rank,), "zeros")
        return {"householder": householder, "r_raw": r_raw, "r_tilde_raw": r_tilde_raw, "b": b}

    def _build_batch_norm(self, k, dim, rank):
        return {
            "log_scale": self._weight(k, "batch_norm_log_scale", (dim,), "zeros"),
            "shift": self._weight(k, "batch_norm_shift", (dim,), "zeros"),
            "moving_mean": self._weight(k, "batch_norm_moving_mean", (dim,), "zeros",
                                        trainable=False),
            "moving_variance": self._weight(k, "batch_norm_moving_variance", (dim,), "ones",
                                            trainable=False),
        }

    # -- the bijectors ---------------------------------------------------------
    def _step_bijector(self, k, z=None, training=False):
        """Bijector of step k; a batch-norm step in training takes z's statistics."""
        name, params = self.step_names[k], self.steps[k]
        dtype = self.compute_dtype
        value = {key: ops.cast(var.value, dtype) for key, var in params.items()}
        if name == "batch_norm" and training:
            axes = list(range(len(z.shape) - 1))
            mean, variance = _common.moments(z, axes)
            self._update_moving(params, mean, variance)
            value["moving_mean"], value["moving_variance"] = mean, variance
        return step_bijector(name, value, self.epsilon)

    def _update_moving(self, params, mean, variance):
        decay = 1.0 - self.momentum
        for key, batch in (("moving_mean", mean), ("moving_variance", variance)):
            var = params[key]
            batch = ops.cast(ops.stop_gradient(batch), var.dtype)
            var.assign(var - decay * (var - batch))

    def bijector(self, training=False):
        """The chain as one `tfp.bijectors.Chain`, in application order.

        `tfb.Chain` applies its list last-to-first, so the list is step K
        first. Batch-norm steps use their moving statistics: batch statistics
        belong to a batch, not to a fixed bijector, so `training=True` is
        refused when the chain has a batch-norm step.

        Args:
            training: False (default) for the bijector at the current
                weights and moving statistics; True only for chains without
                a batch-norm step.

        Returns:
            A `tfp.bijectors.Chain` mapping z_0 to z_K.
        """
        if not self.built:
            raise ValueError("The NormalizingFlow is not built; call it or build it first.")
        if training and "batch_norm" in self.step_names:
            raise ValueError(
                "`training`=True: a batch-norm step normalizes with the statistics of "
                "the batch it is called on, so it has no fixed bijector; use "
                "bijector(training=False) (moving statistics) or call the layer."
            )
        steps = [self._step_bijector(k) for k in range(len(self.step_names))]
        return tfb.Chain(list(reversed(steps)), name="normalizing_flow")

    def call(self, z, training=None):
        return forward(functools.partial(self._step_bijector, training=bool(training)),
                       len(self.step_names), z)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape), tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "flows": self.flows if isinstance(self.flows, str) else list(self.flows),
                "length": self.length,
                "sylvester_rank": self.sylvester_rank,
                "momentum": self.momentum,
                "epsilon": self.epsilon,
                "seed": self.seed,
            }
        )
        return config

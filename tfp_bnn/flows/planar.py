"""Planar flow (Rezende & Mohamed 2015)."""

from keras import ops

from tfp_bnn.flows import _common


class Planar(_common.FlowBijector):
    """One planar step y = z + u_hat tanh(w^T z + b).

    Jacobian: J = I + h'(w^T z + b) u_hat w^T, det J = 1 + h'(w^T z + b) w^T u_hat.
    With h = tanh (h' in (0, 1]) the step is invertible iff w^T u_hat >= -1.
    That holds by construction: u is unconstrained and

        u_hat = u + (m(w^T u) - w^T u) w / ||w||^2,  m(a) = -1 + softplus(a),

    so w^T u_hat = m(w^T u) > -1 for every real u (Rezende & Mohamed, App. A).
    There is no closed-form inverse.

    The bijector does math only: it takes the parameters as tensors (a layer
    such as `tfp_bnn.flows.NormalizingFlow` owns the variables). The event is
    the last axis of size D; inputs may have any batch shape.

    Args:
        w: [D], the direction of the hyperplane.
        u: [D], the unconstrained translation direction.
        b: scalar offset.
        validate_args: passed to `tfp.bijectors.Bijector`.
        name: name scope.

    Example:
    >>> bij = Planar(w=[1.0, 0.0], u=[0.5, 0.5], b=0.0)
    >>> y = bij.forward([[0.3, -0.2]])
    >>> log_det = bij.forward_log_det_jacobian([[0.3, -0.2]], event_ndims=1)
    >>> y.shape, log_det.shape
    (TensorShape([1, 2]), TensorShape([1]))
    """

    PARAMETER_NDIMS = {"w": 1, "u": 1, "b": 0}

    def __init__(self, w, u, b, validate_args=False, name="planar"):
        super().__init__(dict(locals()))

    @property
    def w(self):
        return self._w

    @property
    def u(self):
        return self._u

    @property
    def b(self):
        return self._b

    def _w_dot_u(self):
        return ops.sum(self._w * self._u, axis=-1)

    def u_hat(self):
        """The constrained translation direction, w^T u_hat = m(w^T u) > -1.

        Returns:
            A tensor of the shape of `u`: u + (m(w^T u) - w^T u) w / |w|^2,
            m(a) = softplus(a) - 1, which keeps the step invertible.
        """
        a = self._w_dot_u()
        w_sq = ops.maximum(ops.sum(ops.square(self._w), axis=-1), _common.tiny(self.dtype))
        # m(a) - a = softplus(-a) - 1, with no cancellation for large |a|.
        coefficient = (ops.softplus(-a) - 1.0) / w_sq
        return self._u + coefficient[..., None] * self._w

    def _preactivation(self, x):
        return ops.sum(x * self._w, axis=-1) + self._b

    def _forward(self, x):
        return x + self.u_hat() * ops.tanh(self._preactivation(x))[..., None]

    def _forward_log_det_jacobian(self, x):
        # log|1 + h'(s) m(w^T u)|, computed without cancellation.
        return _common.log_one_plus_tanh_prime_m(self._preactivation(x), self._w_dot_u())

"""Radial flow (Rezende & Mohamed 2015)."""

from keras import ops

from tfp_bnn.flows import _common


class Radial(_common.FlowBijector):
    """One radial step y = z + beta / (alpha + r) (z - z0), r = ||z - z0||.

    Contracts (beta < 0) or expands (beta > 0) space around the centre z0.
    The step is invertible iff beta >= -alpha; that holds by construction:

        alpha = softplus(alpha_raw) > 0,  beta = -alpha + softplus(beta_raw).

    Rezende & Mohamed 2015, with h = 1 / (alpha + r):

        log|det J| = (D - 1) log(1 + beta h) + log(1 + beta h - beta r h^2).

    Both factors are evaluated as ratios of non-negative terms,
    1 + beta h = (r + softplus(beta_raw)) / (alpha + r) and
    1 + beta h - beta r h^2 = (r (2 alpha + r) + alpha softplus(beta_raw)) h^2,
    so nothing cancels when beta is close to -alpha. The inverse has a closed
    form: along the ray from z0, ||y - z0|| = rho determines r as the positive
    root of r^2 + (softplus(beta_raw) - rho) r - alpha rho = 0.

    The bijector does math only: parameters come in as tensors. The event is
    the last axis of size D; inputs may have any batch shape.

    Args:
        z0: [D], the centre.
        alpha_raw: scalar, alpha = softplus(alpha_raw).
        beta_raw: scalar, beta = -alpha + softplus(beta_raw).
        validate_args: passed to `tfp.bijectors.Bijector`.
        name: name scope.

    Example:
    >>> bij = Radial(z0=[0.0, 0.0], alpha_raw=0.0, beta_raw=1.0)
    >>> x = bij.inverse(bij.forward([[1.0, 2.0]]))
    >>> np.allclose(x, [[1.0, 2.0]], atol=1e-5)   # the round trip
    True
    """

    PARAMETER_NDIMS = {"z0": 1, "alpha_raw": 0, "beta_raw": 0}

    def __init__(self, z0, alpha_raw, beta_raw, validate_args=False, name="radial"):
        super().__init__(dict(locals()))

    @property
    def z0(self):
        return self._z0

    @property
    def alpha(self):
        return ops.softplus(self._alpha_raw)

    @property
    def beta(self):
        """-alpha + softplus(beta_raw) >= -alpha."""
        return ops.softplus(self._beta_raw) - self.alpha

    def _forward(self, x):
        diff = x - self._z0
        r = _common.safe_norm(diff)
        return x + (self.beta / (self.alpha + r))[..., None] * diff

    def _forward_log_det_jacobian(self, x):
        alpha = self.alpha
        lift = ops.softplus(self._beta_raw)  # alpha + beta
        r = _common.safe_norm(x - self._z0)
        dim = ops.cast(ops.shape(x)[-1], x.dtype)
        log_alpha_r = ops.log(alpha + r)
        log_radial = ops.log(r + lift) - log_alpha_r
        log_along = ops.log(r * (2.0 * alpha + r) + alpha * lift) - 2.0 * log_alpha_r
        return (dim - 1.0) * log_radial + log_along

    def _inverse(self, y):
        alpha = self.alpha
        lift = ops.softplus(self._beta_raw)
        diff = y - self._z0
        rho = _common.safe_norm(diff)
        shift = lift - rho
        root = ops.sqrt(ops.square(shift) + 4.0 * alpha * rho)
        # The positive root, in the form that does not cancel for either sign
        # of `shift`; the unused branch's denominator is kept away from 0 so
        # that its gradient cannot turn into NaN through the where.
        positive = shift >= 0.0
        denominator = ops.where(positive, shift + root, ops.ones_like(root))
        r = ops.where(positive, 2.0 * alpha * rho / denominator, 0.5 * (root - shift))
        # z - z0 = (y - z0) r / rho, and r / rho = (alpha + r) / (r + lift).
        return self._z0 + ((alpha + r) / (r + lift))[..., None] * diff

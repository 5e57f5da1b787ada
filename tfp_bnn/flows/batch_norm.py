"""Batch normalization as a flow (Dinh et al. 2017)."""

from keras import ops

from tfp_bnn import _validation as check
from tfp_bnn.flows import _common


class BatchNormFlow(_common.FlowBijector):
    """y = exp(log_scale) * (z - mean) / sqrt(variance + epsilon) + shift.

    An element-wise affine map for given statistics (Dinh et al. 2017):

        log|det J| = sum_i (log_scale_i - log(variance_i + epsilon) / 2),
        z = (y - shift) exp(-log_scale) sqrt(variance + epsilon) + mean.

    The scale is exp(log_scale) > 0, so the map is invertible for every real
    log_scale. Which statistics to use (the batch's in training, moving
    averages at inference) is the owning layer's business
    (`tfp_bnn.flows.NormalizingFlow`); the bijector only does the math.

    Args:
        mean: [D] (or broadcastable) centre.
        variance: [D] non-negative variance.
        log_scale: [D] log of the output scale.
        shift: [D] output offset.
        epsilon: added to the variance, > 0.
        validate_args: passed to `tfp.bijectors.Bijector`.
        name: name scope.

    Example:
    >>> bij = BatchNormFlow(mean=[1.0], variance=[4.0], log_scale=[0.0], shift=[0.0])
    >>> bij.forward([[3.0]]).numpy()  # (3 - 1) / sqrt(4 + 1e-3)
    array([[0.999875]], dtype=float32)
    """

    PARAMETER_NDIMS = {"mean": 1, "variance": 1, "log_scale": 1, "shift": 1}

    def __init__(self, mean, variance, log_scale, shift, epsilon=1e-3, validate_args=False,
                 name="batch_norm_flow"):
        parameters = dict(locals())
        self._epsilon = check.positive("epsilon", epsilon)
        super().__init__(parameters)

    def _log_multiplier(self):
        """log of the element-wise slope exp(log_scale) / sqrt(variance + epsilon)."""
        return self._log_scale - 0.5 * ops.log(self._variance + self._epsilon)

    def _forward(self, x):
        return ops.exp(self._log_multiplier()) * (x - self._mean) + self._shift

    def _inverse(self, y):
        return ops.exp(-self._log_multiplier()) * (y - self._shift) + self._mean

    def _forward_log_det_jacobian(self, x):
        log_det = ops.sum(self._log_multiplier() + ops.zeros_like(self._mean), axis=-1)
        return ops.broadcast_to(log_det, ops.shape(x)[:-1])

    def _inverse_log_det_jacobian(self, y):
        return -self._forward_log_det_jacobian(y)

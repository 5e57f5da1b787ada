"""The planar bijector: its parameterization keeps it invertible, and it stays finite when
degenerate (the shared bijector contract is in tests/integration/test_bijector_contract.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.flows.bijector_cases import D
from tests.flows.bijector_cases import raw_params
from tfp_bnn.flows import Planar


def test_degenerate_planar_stays_finite():
    # w^T u = -2500 D: softplus underflows and w^T u_hat rounds to -1, so the
    # step is singular in float32 at w^T z + b = 0; the log-det stays finite.
    w = tf.fill([D], tf.constant(-50.0))
    u = tf.fill([D], tf.constant(50.0))
    bijector = Planar(w, u, tf.constant(0.0))
    log_det = bijector.forward_log_det_jacobian(tf.zeros((1, D)), event_ndims=1).numpy()
    assert np.all(np.isfinite(log_det)) and log_det[0] < -50.0


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_planar_parameterization_keeps_it_invertible(scale):
    rng = np.random.default_rng(7)
    for _ in range(50):
        params = raw_params("planar", rng, scale=scale)
        bijector = Planar(**params)
        w_dot_u_hat = float(tf.reduce_sum(bijector.w * bijector.u_hat()))
        a = float(np.dot(params["w"], params["u"]))
        m = -1.0 + np.logaddexp(0.0, a)  # > -1
        # w^T u_hat sums terms w_i u_i and (m - a) w_i^2 / ||w||^2: rounding is
        # relative to their magnitudes.
        magnitude = np.abs(params["w"] * params["u"]).sum() + abs(m - a)
        tol = 64 * np.finfo(np.float64).eps * (1.0 + magnitude)
        assert w_dot_u_hat >= -1.0 - tol
        assert abs(w_dot_u_hat - m) <= tol

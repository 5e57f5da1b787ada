"""The Sylvester bijector: full-rank log-det and its parameterization (orthonormal Q,
triangular R with diag(R) diag(R~) > -1); the shared bijector contract is in
tests/integration/test_bijector_contract.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.flows.bijector_cases import D
from tests.flows.bijector_cases import RANK
from tests.flows.bijector_cases import TOL
from tests.flows.bijector_cases import autodiff_log_det
from tests.flows.bijector_cases import make
from tests.flows.bijector_cases import raw_params


def test_full_rank_sylvester_log_det():
    rng = np.random.default_rng(3)
    bijector = make("sylvester", raw_params("sylvester", rng, rank=D))
    x = tf.constant(rng.normal(size=(8, D)))
    expected = autodiff_log_det(bijector, x)
    actual = bijector.forward_log_det_jacobian(x, event_ndims=1).numpy()
    np.testing.assert_array_less(np.abs(actual - expected), TOL * (1.0 + np.abs(expected)))


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_sylvester_parameterization(scale):
    rng = np.random.default_rng(9)
    for _ in range(20):
        bijector = make("sylvester", raw_params("sylvester", rng, scale=scale))
        q = bijector.q().numpy()
        np.testing.assert_allclose(q.T @ q, np.eye(RANK), atol=1e-12)
        r, r_tilde = bijector.r().numpy(), bijector.r_tilde().numpy()
        assert np.array_equal(r, np.triu(r)) and np.array_equal(r_tilde, np.triu(r_tilde))
        assert np.all(np.diag(r) * np.diag(r_tilde) > -1.0)

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


def _numpy_forward(params, x):
    """y = z + Q R tanh(R~ Q^T z + b) in float64 NumPy, from the raw parameters."""
    q = np.eye(D, RANK)
    for v in params["householder"][::-1]:  # Q = H_1 ... H_M [I; 0]
        q = q - 2.0 * np.outer(v, v @ q) / (v @ v)
    c, t = np.diag(params["r_raw"]), np.diag(params["r_tilde_raw"])
    r = np.triu(params["r_raw"], 1) + np.diag((np.log1p(np.exp(c)) - 1.0) * np.exp(-t))
    r_tilde = np.triu(params["r_tilde_raw"], 1) + np.diag(np.exp(t))
    hidden = np.tanh((x @ q) @ r_tilde.T + params["b"])
    return x + hidden @ r.T @ q.T


@pytest.mark.parametrize("rows", [4, 64, 130, 1000])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_matches_numpy_in_eager_mode_at_any_batch_size(rows, dtype):
    # TensorFlow 2.18's oneDNN einsum, the floor of setup.py with oneDNN on,
    # got "...d,dm->...m" wrong in eager mode from ~64 rows (relative error ~1),
    # which made the flow posterior's Sylvester samples wrong there.
    rng = np.random.default_rng(rows)
    params = raw_params("sylvester", rng)
    bijector = make("sylvester", {k: v.astype(dtype) for k, v in params.items()})
    x = rng.normal(size=(rows, D))
    actual = bijector.forward(tf.constant(x, dtype)).numpy()
    expected = _numpy_forward(params, x)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * np.abs(expected).max())


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

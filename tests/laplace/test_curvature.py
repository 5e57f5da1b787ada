"""The last layer's GGN, its eigenbasis and the evidence maximiser (pure NumPy math)."""

import numpy as np
import pytest

from tfp_bnn.laplace import curvature

P, K, N = 4, 3, 12


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    phi = curvature.design(rng.normal(size=(N, P - 1)), use_bias=True)
    return phi, rng.normal(size=(P, K))


def accumulate(structure, likelihood, phi, weights, batch=5):
    acc = curvature.GGNAccumulator(structure, likelihood, P, K)
    for start in range(0, N, batch):
        acc.update(phi[start:start + batch], phi[start:start + batch] @ weights)
    return acc


def test_full_ggn_is_the_hessian_of_the_cross_entropy(data):
    # The logits are linear in the last layer's weights, so the GGN is the exact Hessian:
    # central differences of the gradient sum_n phi_n (p_n - y_n)^T. Their error is
    # O(h^2 |f'''|) + O(eps / h) ~ 1e-10 + 1e-11 at h = 1e-5, within atol 1e-8.
    phi, weights = data
    onehot = np.eye(K)[np.arange(N) % K]

    def gradient(theta):
        return (phi.T @ (curvature.softmax(phi @ theta.reshape(P, K)) - onehot)).reshape(-1)

    step, theta = 1e-5, weights.reshape(-1)
    hessian = np.stack([(gradient(theta + step * e) - gradient(theta - step * e)) / (2 * step)
                        for e in np.eye(P * K)], axis=1)
    acc = accumulate("full", "classification", phi, weights)
    np.testing.assert_allclose(acc.full, hessian, atol=1e-8)


def test_kron_equals_full_when_every_example_has_the_same_output_curvature(data):
    # Zero kernel rows: the logits (hence Lambda_n) are the bias for every n, and
    # sum_n phi phi^T (x) Lambda = A (x) Lambda exactly.
    phi, weights = data
    constant = np.zeros_like(weights)
    constant[-1] = weights[-1]
    full = accumulate("full", "classification", phi, constant).eigenbasis()
    kron = accumulate("kron", "classification", phi, constant).eigenbasis()
    np.testing.assert_allclose(kron.covariance(0.5), full.covariance(0.5), atol=1e-12)
    # ... and they differ when Lambda_n varies with n.
    varying = accumulate("kron", "classification", phi, weights).eigenbasis()
    full = accumulate("full", "classification", phi, weights).eigenbasis()
    assert np.abs(varying.covariance(0.5) - full.covariance(0.5)).max() > 1e-3


def test_regression_kron_and_full_are_both_exact(data):
    phi, weights = data
    expected = np.linalg.inv(np.kron(phi.T @ phi, np.eye(K)) / 0.3 + 2.0 * np.eye(P * K))
    for structure in curvature.STRUCTURES:
        basis = accumulate(structure, "regression", phi, weights).eigenbasis(0.3)
        np.testing.assert_allclose(basis.covariance(2.0), expected, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("structure", curvature.STRUCTURES)
def test_output_covariance_and_log_det_match_the_dense_matrices(data, structure):
    phi, weights = data
    basis = accumulate(structure, "classification", phi, weights).eigenbasis()
    lam = 0.7
    covariance = basis.covariance(lam)
    precision = np.linalg.inv(covariance)
    assert basis.log_det(lam) == pytest.approx(np.linalg.slogdet(precision)[1], rel=1e-10)
    jacobians = np.stack([np.kron(row[None], np.eye(K)) for row in phi])  # [N, K, PK]
    expected = np.einsum("nkm,mq,nlq->nkl", jacobians, covariance, jacobians)
    np.testing.assert_allclose(basis.output_covariance(phi, lam), expected, atol=1e-12)


def test_best_prior_precision_maximises_the_evidence(data):
    phi, weights = data
    basis = accumulate("full", "classification", phi, weights).eigenbasis()
    norm = float(np.sum(weights ** 2))
    best = curvature.best_prior_precision(norm, basis)
    # MacKay's fixed point: lambda = gamma / ||theta||^2.
    gamma = np.sum(basis.values / (basis.values + best))
    assert best == pytest.approx(gamma / norm, rel=1e-10)
    grid = np.exp(np.linspace(np.log(best) - 1, np.log(best) + 1, 2001))
    values = [curvature.log_evidence(0.0, norm, basis, lam) for lam in grid]
    # The grid's step is 1e-3 in log lambda: its argmax is within one step of the optimum.
    assert abs(np.log(grid[int(np.argmax(values))]) - np.log(best)) <= 1e-3
    assert curvature.best_prior_precision(0.0, basis, high=50.0) == 50.0


def test_bad_arguments_name_themselves(data):
    with pytest.raises(ValueError, match="`structure` must be one of"):
        curvature.GGNAccumulator("diag", "regression", P, K)
    basis = accumulate("kron", "regression", *data).eigenbasis(1.0)
    with pytest.raises(ValueError, match="`low` must be below `high`"):
        curvature.best_prior_precision(1.0, basis, low=2.0, high=1.0)

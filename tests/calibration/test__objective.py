"""Tests of the calibration objectives' gradients (against central differences) and of the
L-BFGS minimiser (a known minimum, a non-finite objective, an iteration cap)."""

import numpy as np
import pytest

from tfp_bnn.calibration import _objective


def _central_difference(function, theta, step=1e-6):
    gradient = np.zeros_like(theta)
    for k in range(len(theta)):
        bump = np.zeros_like(theta)
        bump[k] = step
        gradient[k] = (function(theta + bump) - function(theta - bump)) / (2 * step)
    return gradient


def test_the_classification_gradient_is_the_derivative_of_the_nll():
    rng = np.random.default_rng(0)
    mapped = rng.normal(size=(3, 7, 4))
    labels = rng.integers(0, 4, size=7)
    _, gradient = _objective.classification_nll(mapped, labels)

    def flat(values):
        return _objective.classification_nll(values.reshape(mapped.shape), labels)[0]
    np.testing.assert_allclose(gradient.ravel(), _central_difference(flat, mapped.ravel()),
                               atol=1e-8)


def test_the_regression_gradient_is_the_derivative_of_the_nll():
    rng = np.random.default_rng(1)
    means, log_variances = rng.normal(size=(2, 4, 5, 3))
    y = rng.normal(size=(5, 3))
    theta = np.array([0.3, -0.2, 0.1])
    _, gradient = _objective.regression_nll(theta, means, log_variances, y)

    def value(t):
        return _objective.regression_nll(t, means, log_variances, y)[0]
    np.testing.assert_allclose(gradient, _central_difference(value, theta), atol=1e-8)


def test_lbfgs_finds_the_rosenbrock_minimum():
    def rosenbrock(theta):
        x, y = theta
        value = (1 - x) ** 2 + 100 * (y - x * x) ** 2
        return value, np.array([-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x)])
    theta, value, iterations, converged = _objective.minimize(rosenbrock, [-1.2, 1.0])
    assert converged and iterations < _objective.MAX_ITERATIONS
    np.testing.assert_allclose(theta, [1.0, 1.0], atol=1e-7)
    assert value < 1e-14


def test_lbfgs_stops_at_its_cap_and_refuses_a_non_finite_objective():
    def slow(theta):
        return float(np.sum(np.cosh(theta))), np.sinh(theta)
    _, _, iterations, converged = _objective.minimize(slow, [5.0, -4.0], max_iterations=2)
    assert iterations == 2 and not converged
    with pytest.raises(FloatingPointError, match="non-finite"):
        _objective.minimize(lambda t: (float("nan"), np.zeros(1)), [0.0])

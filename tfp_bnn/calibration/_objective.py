"""The negative log-likelihoods that post-hoc calibration minimises, with their gradients,
and the L-BFGS that minimises them (NumPy, float64, deterministic).

Classification: S sampled logits per row (S = 1 for a deterministic network) are mapped by
an affine map z' = A_theta(z) and averaged after the softmax, as `tfp_bnn.predict` averages
them:

    p_i = (1/S) sum_s softmax(z'_si),     NLL(theta) = -(1/N) sum_i log p_i[y_i].

With q_s = softmax(z'_s) and r_si = q_si[y_i] / (S p_i[y_i]) (each sample's share of the
row's likelihood), dNLL/dz'_sik = r_si (q_sik - [k == y_i]) / N, which each map pulls back
to its parameters.

Regression: S sampled Gaussians N(mu_sid, exp(v_sid)) per row, whose log variances are
shifted by theta_d = log c_d^2 (the noise variance scaled by c_d^2):

    NLL(theta) = -(1/N) sum_i log (1/S) sum_s prod_d N(y_id | mu_sid, c_d^2 exp(v_sid)),

with dNLL/dtheta_d = -(1/N) sum_{s,i} r_si (((y_id - mu_sid)^2 / (c_d^2 exp(v_sid)) - 1) / 2).
For S = 1 the minimum has the closed form c_d^2 = mean_i (y_id - mu_id)^2 / exp(v_id).
"""

import math

import numpy as np

MAX_ITERATIONS = 500
# Converged when the largest gradient entry is below this (the NLL is per row, O(1)).
GRADIENT_TOLERANCE = 1e-9
HISTORY = 10  # L-BFGS's stored pairs


def _log_softmax(z):
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def classification_nll(mapped, labels):
    """(NLL, dNLL/dmapped) of sampled mapped logits [S, N, K] against labels [N]."""
    num_samples, rows = mapped.shape[:2]
    log_q = _log_softmax(mapped)
    picked = log_q[:, np.arange(rows), labels]  # [S, N]
    peak = picked.max(axis=0)
    log_p = peak + np.log(np.exp(picked - peak).sum(axis=0)) - math.log(num_samples)
    share = np.exp(picked - math.log(num_samples) - log_p)  # r_si, sums to 1 over s
    gradient = np.exp(log_q)
    gradient[:, np.arange(rows), labels] -= 1.0
    gradient *= share[..., None] / rows
    return float(-np.mean(log_p)), gradient


def regression_nll(theta, means, log_variances, y):
    """(NLL, dNLL/dtheta [D]) of S sampled Gaussians [S, N, D] with log variances shifted
    by theta [D], against targets y [N, D]."""
    num_samples, rows = means.shape[:2]
    shifted = log_variances + theta
    z2 = np.square(y - means) * np.exp(-shifted)
    log_density = -0.5 * (math.log(2.0 * math.pi) + shifted + z2)  # [S, N, D]
    per_sample = log_density.sum(axis=-1)
    peak = per_sample.max(axis=0)
    log_p = peak + np.log(np.exp(per_sample - peak).sum(axis=0)) - math.log(num_samples)
    share = np.exp(per_sample - math.log(num_samples) - log_p)
    gradient = -np.einsum("sn,snd->d", share, 0.5 * (z2 - 1.0)) / rows
    return float(-np.mean(log_p)), gradient


def _weak_wolfe(objective, theta, value, direction, slope, c1=1e-4, c2=0.9):
    """A step along `direction` meeting the weak Wolfe conditions (sufficient decrease and
    curvature), by bracketing and bisection (Lewis and Overton 2013): steps grow while the
    slope is still steep, so s.y > 0 for the update. None if no decrease is found."""
    low, high, step = 0.0, math.inf, 1.0
    best = None
    for _ in range(100):
        candidate = theta + step * direction
        new_value, new_gradient = objective(candidate)
        if not math.isfinite(new_value) or new_value > value + c1 * step * slope:
            high = step
        else:
            best = (candidate, new_value, new_gradient)
            if new_gradient @ direction >= c2 * slope:
                return best
            low = step
        step = 0.5 * (low + high) if math.isfinite(high) else 2.0 * low
        if step * np.max(np.abs(direction)) < 1e-16 * (1.0 + np.max(np.abs(theta))):
            break
    return best


def minimize(objective, start, max_iterations=MAX_ITERATIONS,
             tolerance=GRADIENT_TOLERANCE):
    """Minimises a smooth `objective(theta) -> (value, gradient)` from `start` by L-BFGS
    (Nocedal and Wright 2006, Alg. 7.4/7.5) with a weak Wolfe line search.

    Returns:
        (theta, value, iterations, converged).
    """
    theta = np.array(start, dtype=np.float64)
    value, gradient = objective(theta)
    steps, changes = [], []
    for iteration in range(max_iterations):
        if not np.all(np.isfinite(gradient)) or not math.isfinite(value):
            raise FloatingPointError("the calibration objective became non-finite")
        if np.max(np.abs(gradient)) < tolerance:
            return theta, value, iteration, True
        direction = -gradient
        alphas = []
        for s, y in reversed(list(zip(steps, changes))):
            alpha = s @ direction / (y @ s)
            direction -= alpha * y
            alphas.append(alpha)
        if steps:
            direction *= (steps[-1] @ changes[-1]) / (changes[-1] @ changes[-1])
        for (s, y), alpha in zip(zip(steps, changes), reversed(alphas)):
            direction += s * (alpha - y @ direction / (y @ s))
        slope = gradient @ direction
        if slope >= 0:  # not a descent direction: restart from the gradient
            steps, changes, direction = [], [], -gradient
            slope = gradient @ direction
        found = _weak_wolfe(objective, theta, value, direction, slope)
        if found is None:
            return theta, value, iteration, False  # no decrease left at float64
        candidate, new_value, new_gradient = found
        s, y = candidate - theta, new_gradient - gradient
        if s @ y > 1e-12 * (s @ s):
            steps, changes = (steps + [s])[-HISTORY:], (changes + [y])[-HISTORY:]
        theta, value, gradient = candidate, new_value, new_gradient
    return theta, value, max_iterations, False

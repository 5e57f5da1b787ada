"""The last layer's generalised Gauss-Newton (GGN) Hessian, its eigenbasis and the evidence.

The last layer maps features x [D] to outputs f = W^T phi, with phi = [x, 1] (P = D + 1
entries with a bias, else P = D) and W [P, K]. Its parameters theta = vec(W) are taken row
by row (index p * K + k), so the Jacobian of f in theta is J = phi^T (x) I_K and the GGN of
the negative log-likelihood is (Martens 2014; Ritter, Botev and Barber 2018, ICLR)

    H = sum_n (phi_n phi_n^T) (x) Lambda_n,   Lambda_n = d^2 (-log p(y_n | f)) / df^2

- Gaussian regression: Lambda_n = I_K / sigma^2, so H = A (x) I_K / sigma^2 with
  A = sum_n phi_n phi_n^T, exactly (then "kron" and "full" coincide);
- softmax classification: Lambda_n = diag(p_n) - p_n p_n^T. "full" keeps the sum over n;
  "kron" (KFAC) factors it as A (x) G with G = (1/N) sum_n Lambda_n, i.e. N E[phi phi^T]
  (x) E[Lambda] (Ritter et al. 2018, eq. 8; exact when Lambda_n is the same for all n).

With a prior N(0, I / lambda), the posterior precision is H + lambda I. Its eigenbasis does
not depend on lambda: for "full" eigh(H) = V diag(h) V^T, for "kron" the eigenvectors are
U_A (x) U_G with eigenvalues a_i g_j (Immer et al. 2021; Daxberger et al. 2021, "Laplace
Redux", NeurIPS, sec. 3 and app. A), so every lambda costs O(PK) for the log-determinant.
"""

import math

import numpy as np

from tfp_bnn import _validation as check

STRUCTURES = ("full", "kron")
LIKELIHOODS = ("regression", "classification")


def design(features, use_bias):
    """phi = [features, 1] (with a bias) as float64 [N, P].

    Args:
        features: the last layer's inputs, [N, D].
        use_bias: whether the layer has a bias (then P = D + 1, else P = D).

    Returns:
        A float64 array [N, P].

    Example:
    >>> design([[2.0, 3.0]], use_bias=True)
    array([[2., 3., 1.]])
    """
    features = np.asarray(features, np.float64)
    if not use_bias:
        return features
    return np.concatenate([features, np.ones((features.shape[0], 1))], axis=1)


def softmax(logits):
    """Row-wise softmax in float64, stable for large logits.

    Args:
        logits: array [..., K].

    Returns:
        Probabilities of the shape of `logits`, each row summing to 1.

    Example:
    >>> softmax(np.array([[0.0, 0.0], [1000.0, 0.0]]))
    array([[0.5, 0.5],
           [1. , 0. ]])
    """
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class GGNAccumulator:
    """Sums the pieces of the GGN over batches of (phi [B, P], outputs f [B, K]).

    Args:
        structure: "full" or "kron".
        likelihood: "regression" or "classification".
        num_params_in: P, the entries of phi (features, plus 1 with a bias).
        num_outputs: K, the last layer's outputs.

    Example:
    >>> phi = design(np.array([[1.0], [2.0]]), use_bias=True)   # N = 2, P = 2
    >>> accumulator = GGNAccumulator("kron", "regression", 2, 1)
    >>> accumulator.update(phi, outputs=np.zeros((2, 1)))
    >>> accumulator.gram   # A = sum_n phi_n phi_n^T
    array([[5., 3.],
           [3., 2.]])
    >>> basis = accumulator.eigenbasis(noise_variance=1.0)
    >>> basis.values.shape   # [P, K]
    (2, 1)
    """

    def __init__(self, structure, likelihood, num_params_in, num_outputs):
        self.structure = check.one_of("structure", structure, STRUCTURES)
        self.likelihood = check.one_of("likelihood", likelihood, LIKELIHOODS)
        self.shape = (num_params_in, num_outputs)
        self.count = 0
        self.gram = np.zeros((num_params_in, num_params_in))  # A = sum_n phi phi^T
        self.output_sum = np.zeros((num_outputs, num_outputs))  # sum_n Lambda_n
        size = num_params_in * num_outputs
        self.full = np.zeros((size, size)) if (
            structure == "full" and likelihood == "classification") else None

    def update(self, phi, outputs):
        self.count += phi.shape[0]
        self.gram += phi.T @ phi
        if self.likelihood == "regression":
            return
        probs = softmax(outputs)
        self.output_sum += np.diag(probs.sum(axis=0)) - probs.T @ probs  # sum_n Lambda_n
        if self.full is not None:
            # sum_n phi phi^T (x) (diag(p) - p p^T) as two matmuls over z_n = phi_n (x) p_n:
            # the diag(p) part is block diagonal in the classes, the rest is Z^T Z.
            num_in, num_out = self.shape
            z = (phi[:, :, None] * probs[:, None, :]).reshape(len(phi), -1)
            diagonal = (z.T @ phi).reshape(num_in, num_out, num_in)
            self.full += np.einsum("pkq,kl->pkql", diagonal, np.eye(num_out)).reshape(
                self.full.shape) - z.T @ z

    def eigenbasis(self, noise_variance=None):
        """The `Eigenbasis` of H accumulated so far.

        Args:
            noise_variance: sigma^2 > 0 of a regression likelihood (H = A (x)
                I / sigma^2); unused for classification.

        Returns:
            An `Eigenbasis` of the chosen structure.
        """
        num_in, num_out = self.shape
        if self.likelihood == "regression":
            output_factor = np.eye(num_out) / noise_variance
        else:
            output_factor = self.output_sum / max(self.count, 1)
        if self.structure == "kron":
            return Eigenbasis.kron(self.gram, output_factor)
        full = self.full if self.full is not None else np.kron(self.gram, output_factor)
        return Eigenbasis.full(full, (num_in, num_out))


def _eigh(matrix):
    values, vectors = np.linalg.eigh(0.5 * (matrix + matrix.T))
    # H is positive semi-definite; rounding may leave eigenvalues of -1e-16.
    return np.maximum(values, 0.0), vectors


class Eigenbasis:
    """H = Q diag(h) Q^T, with Q dense ("full") or U_A (x) U_G ("kron").

    Build with `Eigenbasis.full(H, (P, K))` or `Eigenbasis.kron(A, G)`.

    Args:
        structure: "full" or "kron".
        values: the eigenvalues h, as in the attribute.
        vectors: the eigenvectors, as in the attribute.
        shape: (P, K).

    Attributes:
        structure: "full" or "kron".
        values: h as [P * K] ("full") or [P, K] (a_i g_j, "kron").
        vectors: V [PK, PK] ("full") or (U_A [P, P], U_G [K, K]) ("kron").

    Example:
    >>> basis = Eigenbasis.kron(np.diag([4.0, 1.0]), np.eye(1))   # H = diag(4, 1)
    >>> round(basis.log_det(prior_precision=1.0), 4)   # log((4 + 1) (1 + 1))
    2.3026
    >>> basis.covariance(prior_precision=1.0)   # (H + I)^-1
    array([[0.2, 0. ],
           [0. , 0.5]])
    """

    def __init__(self, structure, values, vectors, shape):
        self.structure, self.values, self.vectors, self.shape = structure, values, vectors, shape

    @classmethod
    def full(cls, hessian, shape):
        values, vectors = _eigh(hessian)
        return cls("full", values, vectors, shape)

    @classmethod
    def kron(cls, feature_factor, output_factor):
        a, u_a = _eigh(feature_factor)
        g, u_g = _eigh(output_factor)
        return cls("kron", np.outer(a, g), (u_a, u_g), (len(a), len(g)))

    def log_det(self, prior_precision):
        """log det(H + lambda I).

        Args:
            prior_precision: lambda > 0.

        Returns:
            A float.
        """
        return float(np.sum(np.log(self.values + prior_precision)))

    def sampling_factors(self, prior_precision):
        """Factors of the posterior covariance S = (H + lambda I)^-1 = L L^T.

        Args:
            prior_precision: lambda > 0.

        Returns:
            "full": (L [PK, PK],); "kron": (U_A, U_G, scales [P, K]) with
            theta = vec(U_A (scales * E) U_G^T) for E ~ N(0, I) [P, K].
        """
        scales = 1.0 / np.sqrt(self.values + prior_precision)
        if self.structure == "full":
            return (self.vectors * scales[None, :],)
        return self.vectors + (scales,)

    def covariance(self, prior_precision):
        """The dense posterior covariance S = (H + lambda I)^-1.

        Args:
            prior_precision: lambda > 0.

        Returns:
            A float64 array [PK, PK], rows and columns in theta order.
        """
        if self.structure == "full":
            (factor,) = self.sampling_factors(prior_precision)
            return factor @ factor.T
        u_a, u_g, scales = self.sampling_factors(prior_precision)
        basis = np.kron(u_a, u_g)
        return (basis * np.square(scales).reshape(-1)[None, :]) @ basis.T

    def output_covariance(self, phi, prior_precision):
        """Cov[f_n] = J_n S J_n^T, the linearised predictive covariance of the outputs.

        Args:
            phi: design rows [N, P] (see `design`).
            prior_precision: lambda > 0.

        Returns:
            A float64 array [N, K, K].
        """
        num_in, num_out = self.shape
        if self.structure == "full":
            (factor,) = self.sampling_factors(prior_precision)
            # J_n L = sum_p phi_np L[(p, k), :]: [N, K, PK].
            jl = np.einsum("np,pkm->nkm", phi, factor.reshape(num_in, num_out, -1))
            return np.einsum("nkm,nlm->nkl", jl, jl)
        u_a, u_g, scales = self.sampling_factors(prior_precision)
        rotated = np.square(phi @ u_a)  # [N, P]
        weights = rotated @ np.square(scales)  # [N, K]: sum_i phi'_i^2 / (a_i g_j + lambda)
        return np.einsum("kj,nj,lj->nkl", u_g, weights, u_g)


def log_evidence(log_likelihood, map_norm, eigenbasis, prior_precision):
    """The Laplace log marginal likelihood at a scalar prior precision lambda.

        log Z = log p(D | theta*) + (M / 2) log lambda - (lambda / 2) ||theta*||^2
                - (1 / 2) log det(H + lambda I)

    (MacKay 1992; Daxberger et al. 2021, eq. 4), M = P * K parameters, theta* = the trained
    weights. Exact for a linear-Gaussian model when theta* is the MAP under lambda.

    Args:
        log_likelihood: log p(D | theta*), summed over the data.
        map_norm: ||theta*||^2.
        eigenbasis: the `Eigenbasis` of the GGN H.
        prior_precision: lambda > 0.

    Returns:
        log Z, a float.

    Example:
    >>> basis = Eigenbasis.kron(np.array([[3.0]]), np.eye(1))   # H = 3, M = 1
    >>> round(log_evidence(-2.0, 0.5, basis, prior_precision=1.0), 4)   # -2 - 0.25 - log(4)/2
    -2.9431
    """
    size = eigenbasis.values.size
    return (log_likelihood + 0.5 * size * math.log(prior_precision)
            - 0.5 * prior_precision * map_norm - 0.5 * eigenbasis.log_det(prior_precision))


def best_prior_precision(map_norm, eigenbasis, low=1e-6, high=1e6, iterations=200):
    """The lambda in [low, high] that maximises `log_evidence` for fixed theta*.

    d log Z / d lambda = (1/2) [sum_i h_i / (lambda (h_i + lambda)) - ||theta*||^2]: the sum
    falls strictly from +inf to 0 as lambda grows, so the maximiser is the one root (MacKay's
    gamma / ||theta*||^2 = lambda, gamma = sum_i h_i / (h_i + lambda)), found by bisection in
    log lambda to float precision; it is clipped to [low, high].

    Args:
        map_norm: ||theta*||^2 of the trained weights.
        eigenbasis: the `Eigenbasis` of the GGN H.
        low: smallest lambda allowed, > 0.
        high: largest lambda allowed, > low.
        iterations: most bisection steps.

    Returns:
        lambda, a float in [low, high].

    Example:
    >>> basis = Eigenbasis.kron(np.array([[3.0]]), np.eye(1))   # H = 3
    >>> round(best_prior_precision(0.5, basis), 6)   # 3 / (lambda (3 + lambda)) = 0.5
    1.372281
    """
    low = check.positive("low", low)
    high = check.positive("high", high)
    if not low < high:
        raise ValueError(f"`low` must be below `high`, got low={low!r}, high={high!r}.")
    values = eigenbasis.values.reshape(-1)

    def slope(lam):
        return np.sum(values / (lam * (values + lam))) - map_norm

    if slope(high) >= 0:
        return high
    if slope(low) <= 0:
        return low
    lo, hi = math.log(low), math.log(high)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if slope(math.exp(mid)) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp(0.5 * (lo + hi))

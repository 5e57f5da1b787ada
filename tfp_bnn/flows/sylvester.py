"""Orthogonal Sylvester flow with Householder Q (van den Berg et al. 2018)."""

from keras import ops

from tfp_bnn.flows import _common


def householder_columns(vectors):
    """Q = H_1 ... H_M [I_M; 0]: M orthonormal columns in R^D from M reflections.

    H_k = I - 2 v_k v_k^T / ||v_k||^2. Orthonormal by construction for any
    nonzero v_k, with plain differentiable ops (no QR, no runtime checks).

    Args:
        vectors: [M, D] reflection vectors, M <= D, M known statically.

    Returns:
        [D, M] with Q^T Q = I_M.
    """
    num, dim = vectors.shape[-2], ops.shape(vectors)[-1]
    if num is None:
        raise ValueError("The number of Householder vectors must be known statically.")
    columns = ops.eye(dim, num, dtype=vectors.dtype)
    sq_norms = ops.maximum(ops.sum(ops.square(vectors), axis=-1), _common.tiny(vectors.dtype))
    for k in reversed(range(num)):
        v = vectors[k]
        projection = _common.transposed_matvec(columns, v)  # v^T Q, [M]
        columns = columns - (2.0 / sq_norms[k]) * v[:, None] * projection[None, :]
    return columns


class Sylvester(_common.FlowBijector):
    """One Sylvester step y = z + Q R tanh(R~ Q^T z + b).

    Q [D, M] has orthonormal columns (M <= D Householder reflections), R and
    R~ are M x M upper triangular. Then det J = det(I + S R~ Q^T Q R)
    with S = diag(h'), and Q^T Q = I leaves a triangular matrix, so

        log|det J| = sum_i log|1 + h'(a_i) r_ii r~_ii|,  a = R~ Q^T z + b.

    With h = tanh the step is invertible when r_ii r~_ii > -1. That holds by
    construction: the strictly upper parts of `r_raw` and `r_tilde_raw` are
    the off-diagonals of R and R~, and their diagonals c and t give

        r~_ii = exp(t_i),  r_ii = m(c_i) exp(-t_i),  m(c) = -1 + softplus(c),

    so r_ii r~_ii = m(c_i) > -1 (the planar flow's m). The strictly lower
    parts of the raw matrices are ignored. No closed-form inverse.

    The bijector does math only: parameters come in as tensors. The event is
    the last axis of size D; inputs may have any batch shape.

    Args:
        householder: [M, D] reflection vectors defining Q.
        r_raw: [M, M], raw R (diagonal: c).
        r_tilde_raw: [M, M], raw R~ (diagonal: t = log r~_ii).
        b: [M] offsets.
        validate_args: passed to `tfp.bijectors.Bijector`.
        name: name scope.

    Example:
    >>> bij = Sylvester(tf.random.normal([2, 3]), tf.zeros([2, 2]), tf.zeros([2, 2]),
    ...                 tf.zeros([2]))
    >>> bij.forward_log_det_jacobian(tf.ones([4, 3]), event_ndims=1).shape
    TensorShape([4])
    """

    PARAMETER_NDIMS = {"householder": 2, "r_raw": 2, "r_tilde_raw": 2, "b": 1}

    def __init__(self, householder, r_raw, r_tilde_raw, b, validate_args=False,
                 name="sylvester"):
        super().__init__(dict(locals()))

    def q(self):
        """Q, the orthonormal columns the flow acts in.

        Returns:
            A [D, M] tensor with Q^T Q = I, from the Householder vectors.
        """
        return householder_columns(self._householder)

    def r(self):
        """Upper triangular R, r_ii = m(c_i) exp(-t_i).

        Returns:
            An [M, M] upper triangular tensor, m(c) = softplus(c) - 1.
        """
        c = _common.diagonal(self._r_raw)
        t = _common.diagonal(self._r_tilde_raw)
        diagonal = (ops.softplus(c) - 1.0) * ops.exp(-t)
        return _common.upper_with_diagonal(self._r_raw, diagonal)

    def r_tilde(self):
        """Upper triangular R~, r~_ii = exp(t_i).

        Returns:
            An [M, M] upper triangular tensor with a positive diagonal.
        """
        t = _common.diagonal(self._r_tilde_raw)
        return _common.upper_with_diagonal(self._r_tilde_raw, ops.exp(t))

    # Matmuls, not einsums: TensorFlow 2.18's oneDNN einsum (the default on
    # CPUs with AVX-512 VNNI/BF16/AMX, and setup.py's floor) gives wrong
    # results in eager mode for "...d,dm->...m" from a batch of about 64 rows
    # (tests/flows/test_sylvester.py).
    def _preactivation(self, x, q):
        projected = ops.matmul(x, q)  # Q^T z, [..., M]
        return ops.matmul(projected, ops.transpose(self.r_tilde())) + self._b

    def _forward(self, x):
        q = self.q()
        hidden = ops.tanh(self._preactivation(x, q))
        # Q R h for each row: (h R^T) Q^T.
        return x + ops.matmul(ops.matmul(hidden, ops.transpose(self.r())), ops.transpose(q))

    def _forward_log_det_jacobian(self, x):
        a = self._preactivation(x, self.q())
        c = _common.diagonal(self._r_raw)
        return ops.sum(_common.log_one_plus_tanh_prime_m(a, c), axis=-1)

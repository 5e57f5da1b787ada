"""The Cholesky algebra of the random-feature GP, on either Keras backend.

`keras.ops` has `cholesky` and `solve_triangular`, but on TensorFlow its
`cholesky` adds a `check_numerics` op (a failed factorisation raises inside
the step instead of giving NaNs) and it has neither a transposed triangular
solve nor a Cholesky solve, which would cost an explicit D x D transpose. So
TensorFlow keeps the `tf.linalg` kernels the layer was measured with, and JAX
gets `jax.scipy.linalg`'s, which XLA compiles with the rest of the step.
The shapes of the posterior draws are dynamic on TensorFlow, static on JAX.
"""

import keras
from tfp_bnn._tf import tf

from tfp_bnn import _backend


def cholesky(matrix):
    """The lower Cholesky factor L of a symmetric positive-definite `matrix`."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415 - the JAX backend imported it already

        return jax.numpy.linalg.cholesky(matrix)
    return tf.linalg.cholesky(matrix)


def triangular_solve(lower, rhs, transpose=False):
    """x with L x = rhs, or L^T x = rhs with `transpose`; L lower triangular."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415

        return jax.scipy.linalg.solve_triangular(lower, rhs, trans=1 if transpose else 0,
                                                 lower=True)
    return tf.linalg.triangular_solve(lower, rhs, adjoint=transpose)


def cholesky_solve(lower, rhs):
    """x with L L^T x = rhs."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415

        return jax.scipy.linalg.cho_solve((lower, True), rhs)
    return tf.linalg.cholesky_solve(lower, rhs)


def gram(features):
    """features^T features, without materialising the transpose on TensorFlow."""
    if _backend.is_jax():
        return keras.ops.matmul(keras.ops.transpose(features), features)
    return tf.matmul(features, features, transpose_a=True)


def noise_shape(*dims):
    """A shape to draw noise of: static on JAX; on TensorFlow one stacked tensor,
    since `num_samples` may be a scalar tensor there."""
    if _backend.is_jax():
        return tuple(int(d) for d in dims)
    return tf.stack(dims)

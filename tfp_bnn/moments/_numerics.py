"""The few operations of `tfp_bnn.moments` whose form depends on the backend.

Everything else in the package is `keras.ops`. Here:

- `wide_float`: float64 where the backend computes in it (TensorFlow
  always; JAX only with `jax_enable_x64`, else an array asked for float64
  silently stays float32, with a warning), else float32.
- `sum_of_others`: sum_{j != i} x_j along the last axis for x >= 0 without
  the cancellation of total - x_i: in float64 where there is one, else
  from exclusive cumulative sums (no difference is taken).
- `erfc`: the backends' own complementary error function (`keras.ops.erfc`
  is not in Keras 3.10, the floor of setup.py's range; 1 - erf would lose
  the small tails the rectified Gaussian needs).
- `cholesky`: the backends' own kernels, which return NaN for a matrix
  that is not positive definite, eagerly and compiled alike;
  `keras.ops.cholesky` raises instead (on TensorFlow a `check_numerics`
  inside a compiled step, on JAX a ValueError when called eagerly).
"""

import keras
from keras import ops

from tfp_bnn import _backend
from tfp_bnn._tf import tf


def wide_float():
    """"float64" if the backend computes in it, else "float32"."""
    if not _backend.is_jax():
        return "float64"
    import jax  # noqa: PLC0415 - the active backend

    return "float64" if jax.config.jax_enable_x64 else "float32"


def sum_of_others(values):
    """sum_{j != i} values_j along the last axis, for non-negative `values`.

    Returned in the dtype of `values`. In float64 the row total minus the own
    term keeps float32 precision (see `tfp_bnn.moments.softmax`); without
    float64 (JAX by default) the sum before i plus the sum after i, two
    exclusive cumulative sums of non-negative terms, is accurate to float32
    rounding relative to itself.
    """
    dtype = keras.backend.standardize_dtype(values.dtype)
    if wide_float() == "float64":
        own = ops.cast(values, "float64")
        return ops.cast(ops.sum(own, axis=-1, keepdims=True) - own, dtype)
    return _exclusive_cumsum(values) + ops.flip(_exclusive_cumsum(ops.flip(values, -1)), -1)


def _exclusive_cumsum(values):
    """sum_{j < i} values_j along the last axis: the partial sums, shifted by one."""
    partial = ops.cumsum(values, axis=-1)[..., :-1]
    return ops.concatenate([ops.zeros_like(values[..., :1]), partial], axis=-1)


def erfc(x):
    """1 - erf(x), accurate where it is small (x of a few units and more)."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415 - the active backend

        return jax.lax.erfc(x)
    return tf.math.erfc(x)


def cholesky(matrix):
    """The lower Cholesky factor of a batch of matrices; NaN where not positive definite."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415 - the active backend

        return jax.numpy.linalg.cholesky(matrix)
    return tf.linalg.cholesky(matrix)

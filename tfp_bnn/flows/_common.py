"""Numerics shared by the flow bijectors (private).

The bijectors compute in `keras.ops`, on TFP's substrate of the active Keras
backend. The few operations whose TensorFlow kernel the flows were measured
with and keras.ops spells differently (a transposed matvec, a diagonal, the
moments of a batch) keep that kernel on TensorFlow and take the JAX
equivalent here, so that TensorFlow's numbers stay the same.
"""

import math

import keras
import numpy as np
from keras import ops

from tfp_bnn import _backend
from tfp_bnn._substrate import tfp
from tfp_bnn._tf import tf

# softplus(LOG_E_MINUS_1) = 1, so m(LOG_E_MINUS_1) = -1 + 1 = 0: the raw value
# at which a planar or Sylvester step is the identity.
LOG_E_MINUS_1 = math.log(math.e - 1.0)


def tiny(dtype):
    """The smallest normal number of `dtype` (TensorFlow flushes subnormals)."""
    return float(np.finfo(keras.backend.standardize_dtype(dtype)).tiny)


def as_tensors(dtype_hint, **params):
    """The parameters as tensors of one dtype: the first that carries one, else the hint."""
    dtype = dtype_hint
    for value in params.values():
        if getattr(value, "dtype", None) is not None:
            dtype = keras.backend.standardize_dtype(value.dtype)
            break
    if _backend.is_jax():
        return {name: ops.convert_to_tensor(value, dtype=dtype) for name, value in params.items()}
    return {name: tf.convert_to_tensor(value, dtype=dtype, name=name)
            for name, value in params.items()}


def safe_norm(x):
    """||x|| over the last axis, floored at eps(dtype)^2 (1.4e-14 in float32).

    The floor keeps the gradient of the norm finite at x = 0, and terms such
    as beta / (alpha + r)^2 in a radial step's gradient below overflow even
    when alpha underflows; below the floor the exact radius hardly matters.
    """
    floor = float(np.finfo(keras.backend.standardize_dtype(x.dtype)).eps) ** 4
    return ops.sqrt(ops.maximum(ops.sum(ops.square(x), axis=-1), floor))


def log_one_plus_tanh_prime_m(s, raw):
    """log(1 + tanh'(s) m(raw)) with m(raw) = -1 + softplus(raw) > -1.

    1 + (1 - tanh^2 s)(-1 + softplus(raw)) = tanh^2 s + sech^2 s * softplus(raw):
    two non-negative terms, so no cancellation when m(raw) is close to -1
    (Rezende & Mohamed 2015: det J of a planar step is 1 + h'(w^T z + b) w^T u_hat). Both
    squares come from e = exp(-2|s|), which neither overflows nor loses sech^2
    to rounding for large |s|. softplus(raw) is floored at the smallest normal
    number: where it underflows (raw < -87 in float32) the step is singular in
    floating point, and the floor keeps the log-determinant finite.
    """
    e = ops.exp(-2.0 * ops.abs(s))
    denominator = ops.square(1.0 + e)
    tanh_sq = ops.square(1.0 - e) / denominator
    sech_sq = 4.0 * e / denominator
    slope = ops.maximum(ops.softplus(raw), tiny(s.dtype))
    return ops.log(tanh_sq + sech_sq * slope)


def transposed_matvec(matrix, vector):
    """matrix^T vector for a [D, M] matrix and a [D] vector: [M]."""
    if _backend.is_jax():
        return ops.matmul(vector, matrix)
    return tf.linalg.matvec(matrix, vector, transpose_a=True)


def diagonal(matrix):
    """The diagonal of a square [M, M] matrix."""
    if _backend.is_jax():
        return ops.diagonal(matrix)
    return tf.linalg.diag_part(matrix)


def upper_with_diagonal(matrix, values):
    """The upper triangle of a square [M, M] matrix with its diagonal replaced by `values`."""
    if _backend.is_jax():
        size = matrix.shape[-1]
        on_diagonal = ops.eye(size, dtype="bool")
        return ops.where(on_diagonal, values[None, :], ops.triu(matrix))
    return tf.linalg.set_diag(tf.linalg.band_part(matrix, 0, -1), values)


def moments(x, axes):
    """Mean and variance of `x` over `axes` (a batch-norm step's batch statistics)."""
    if _backend.is_jax():
        mean = ops.mean(x, axis=axes)
        return mean, ops.mean(ops.square(x - ops.stop_gradient(mean)), axis=axes)
    return tf.nn.moments(x, axes=axes)


def name_scope(name):
    """A bijector's name scope: TensorFlow's, or the plain name on JAX (no graphs)."""
    if _backend.is_jax():
        return _PlainName(name)
    return tf.name_scope(name)


class _PlainName:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self.name

    def __exit__(self, *exc):
        return False


class FlowBijector(tfp.bijectors.Bijector):
    """A bijector on vectors (event_ndims 1) whose parameters are tensors.

    Subclasses list their parameters and each one's event rank in
    `PARAMETER_NDIMS` and pass `dict(locals())` of their `__init__` (which
    has `validate_args` and `name` arguments): this converts the listed
    parameters to one dtype, stores parameter `p` as `self._p`, then
    initialises the TFP bijector.
    """

    PARAMETER_NDIMS = {}

    def __init__(self, parameters):
        validate_args = parameters["validate_args"]
        with name_scope(parameters["name"]) as name:
            converted = as_tensors("float32", **{key: parameters[key]
                                                  for key in self.PARAMETER_NDIMS})
            for key, value in converted.items():
                setattr(self, f"_{key}", value)
            super().__init__(
                forward_min_event_ndims=1,
                dtype=next(iter(converted.values())).dtype,
                validate_args=validate_args,
                parameters=parameters,
                name=name,
            )

    @classmethod
    def _parameter_properties(cls, dtype, num_classes=None):
        return {key: tfp.util.ParameterProperties(event_ndims=ndims)
                for key, ndims in cls.PARAMETER_NDIMS.items()}

"""Numerics shared by the flow bijectors (private)."""

import math

import numpy as np
from tfp_bnn._tf import tf
from tfp_bnn._substrate import tfp

# softplus(LOG_E_MINUS_1) = 1, so m(LOG_E_MINUS_1) = -1 + 1 = 0: the raw value
# at which a planar or Sylvester step is the identity.
LOG_E_MINUS_1 = math.log(math.e - 1.0)


def tiny(dtype):
    """The smallest normal number of `dtype` (TensorFlow flushes subnormals)."""
    return float(np.finfo(tf.as_dtype(dtype).as_numpy_dtype).tiny)


def as_tensors(dtype_hint, **params):
    """The parameters as tensors of one dtype: the first that carries one, else the hint."""
    dtype = dtype_hint
    for value in params.values():
        if getattr(value, "dtype", None) is not None:
            dtype = tf.as_dtype(value.dtype)
            break
    return {name: tf.convert_to_tensor(value, dtype=dtype, name=name)
            for name, value in params.items()}


def safe_norm(x):
    """||x|| over the last axis, floored at eps(dtype)^2 (1.4e-14 in float32).

    The floor keeps the gradient of the norm finite at x = 0, and terms such
    as beta / (alpha + r)^2 in a radial step's gradient below overflow even
    when alpha underflows; below the floor the exact radius hardly matters.
    """
    floor = float(np.finfo(tf.as_dtype(x.dtype).as_numpy_dtype).eps) ** 4
    return tf.sqrt(tf.maximum(tf.reduce_sum(tf.square(x), axis=-1), floor))


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
    e = tf.exp(-2.0 * tf.abs(s))
    denominator = tf.square(1.0 + e)
    tanh_sq = tf.square(1.0 - e) / denominator
    sech_sq = 4.0 * e / denominator
    slope = tf.maximum(tf.nn.softplus(raw), tiny(s.dtype))
    return tf.math.log(tanh_sq + sech_sq * slope)


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
        with tf.name_scope(parameters["name"]) as name:
            converted = as_tensors(tf.float32, **{key: parameters[key]
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

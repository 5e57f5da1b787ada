"""The moment representation shared by every function of `tfp_bnn.moments`.

A random activation is carried as its mean and covariance:

    mean  float32 [B, J, I]   batch, sequence positions (tokens), features
          (or [B, I] for a plain vector per example)
    cov   mode "diagonal": the variances, same shape as `mean`
          mode "full":     [B, J*I, J*I], the covariance of the row-major
                           flattening of each [J, I] slice (index j*I + i),
                           which is the column-stacking vec of the I x J
                           matrix whose columns are the tokens; [B, I, I]
                           for a rank-2 mean
          None: the activation is a constant (deterministic input)

All but the batch dimension must be known when a function is traced: the
covariance algebra reshapes to [B, J, I, J, I] with static J and I.

`mode` is a Python string, so a compiled function must not *return* a
`Moments` (tf.function turns the string into a string tensor, which XLA
cannot output): return `m.mean, m.cov` and rebuild the tuple outside.

The algebra is `keras.ops`: it runs on the TensorFlow and the JAX backend
(and compiles under tf.function(jit_compile=True) and jax.jit alike).
"""

import typing

import keras
import numpy as np
from keras import ops

from tfp_bnn import _tf
from tfp_bnn import _validation as check

MODES = ("diagonal", "full")


def to_float32(x):
    """`x` as a float32 tensor; a floating tensor of another precision is cast.

    The moment algebra runs in float32 whatever the caller computes in: a
    float16 activation (mixed precision) is widened, since its variances
    underflow float16 below 6e-8 and the covariance products overflow it
    past 65504; float64 is narrowed; anything else (a NumPy array, a list)
    is converted.
    """
    if ops.is_tensor(x):
        return x if dtype_of(x) == "float32" else ops.cast(x, "float32")
    return ops.convert_to_tensor(x, "float32")


def dtype_of(x):
    """The dtype of tensor `x` as Keras names it ("float32", "bool", ...)."""
    return keras.backend.standardize_dtype(x.dtype)


def compatible(shape, expected):
    """Whether two static shapes (None = unknown) can describe the same tensor."""
    shape, expected = tuple(shape), tuple(expected)
    return len(shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected))


def vector_or_none(value, name, size):
    """`value` as a float32 tensor of shape (size,), None for None; errors name `name`."""
    if value is None:
        return None
    value = to_float32(value)
    if tuple(value.shape) != (size,):
        raise ValueError(f"`{name}` must have shape ({size},), got {tuple(value.shape)}.")
    return value


def check_mode(mode, name="mode"):
    """Returns `mode` if it is one of `MODES`, else raises a ValueError naming `name`.

    Args:
        mode: "diagonal" or "full".
        name: the argument name used in the error message.

    Returns:
        `mode`.

    Example:
    >>> check_mode("full")
    'full'
    >>> check_mode("dense")
    Traceback (most recent call last):
    ...
    ValueError: `mode` must be one of ['diagonal', 'full'], got 'dense'.
    """
    if _tf.is_tensor(mode):  # a string tensor would compare equal to its text
        raise ValueError(
            f"`{name}` must be one of {list(MODES)}, got a tensor: a Moments was returned "
            "from a tf.function; return `m.mean, m.cov` instead."
        )
    return check.one_of(name, mode, MODES)


class _MomentsFields(typing.NamedTuple):
    # Annotations as text: a tensor of the active backend.
    mean: "typing.Any"
    cov: "typing.Optional[typing.Any]"
    mode: str


class Moments(_MomentsFields):
    """Mean and covariance of a random tensor, batch first.

    A `typing.NamedTuple` with fields `mean`, `cov`, `mode` (see the module
    docstring for the layouts). Constructing one validates `mode`; the
    functions of `tfp_bnn.moments` validate shapes when they receive one.

    Args:
        mean: float32 tensor [B, J, I] or [B, I].
        cov: the variances (mode "diagonal", shape of `mean`), the full
            covariance (mode "full", [B, N, N] with N = J*I or I), or None
            for a constant.
        mode: "diagonal" or "full".

    Example:

    >>> x = Moments.deterministic(np.ones([2, 3, 4]), mode="full")
    >>> tuple(x.variance().shape)
    (2, 3, 4)
    """

    __slots__ = ()

    def __new__(cls, mean, cov=None, mode="diagonal"):
        check_mode(mode)
        return super().__new__(cls, mean, cov, mode)

    @classmethod
    def deterministic(cls, x, mode="diagonal"):
        """A constant `x` (no covariance) in the given `mode`.

        Args:
            x: a tensor (or array) [B, J, I] or [B, I], cast to float32.
            mode: "diagonal" or "full".

        Returns:
            `Moments(x, None, mode)`.
        """
        return cls(to_float32(x), None, check_mode(mode))

    @property
    def is_deterministic(self):
        return self.cov is None

    @property
    def event_size(self):
        """N = J*I (or I): the side of a full covariance. Static."""
        return int(np.prod(self.mean.shape[1:]))

    def variance(self):
        """The variances, in the shape of `mean`, for both modes.

        Returns:
            A float32 tensor shaped like `mean` (zeros for a constant).
        """
        if self.cov is None:
            return ops.zeros_like(self.mean)
        if self.mode == "diagonal":
            return self.cov
        return ops.reshape(ops.diagonal(self.cov, axis1=-2, axis2=-1), ops.shape(self.mean))

    def full_covariance(self):
        """The covariance as [B, N, N] whatever the mode (zeros if None).

        Returns:
            A float32 tensor [B, N, N], N = `event_size`; diagonal for
            mode "diagonal".
        """
        n = self.event_size
        if self.cov is None:
            return ops.zeros((ops.shape(self.mean)[0], n, n), self.mean.dtype)
        if self.mode == "full":
            return self.cov
        return diagonal_matrix(ops.reshape(self.cov, (-1, n)))

    def as_mode(self, mode):
        """The same moments in `mode`; "diagonal" drops every covariance.

        Args:
            mode: "diagonal" or "full".

        Returns:
            A `Moments` in `mode`.
        """
        check_mode(mode)
        if mode == self.mode or self.cov is None:
            return Moments(self.mean, self.cov, mode)
        if mode == "diagonal":
            return Moments(self.mean, self.variance(), mode)
        return Moments(self.mean, self.full_covariance(), mode)

    def scale(self, factor):
        """Moments of `factor * x` for a constant scalar `factor`.

        Args:
            factor: a Python or tensor scalar.

        Returns:
            `Moments` with mean * factor and covariance * factor^2.
        """
        cov = None if self.cov is None else self.cov * (factor * factor)
        return Moments(self.mean * factor, cov, self.mode)


def as_moments(x, name, mode=None, ranks=(2, 3), default_mode=None):
    """`x` (a Moments or a constant tensor) as float32 Moments, shapes checked.

    Args:
        x: a `Moments`, or anything convertible to a float32 tensor, which
            becomes a constant in `mode`, else `default_mode`, else
            "diagonal".
        name: the argument name used in error messages.
        mode: if given, the mode `x` must have.
        ranks: the allowed ranks of the mean.
        default_mode: the mode given to a constant when `mode` is None.

    Returns:
        A `Moments` with float32 tensors.

    Raises:
        ValueError: naming `name`, for a wrong rank, a covariance of the
            wrong shape, or a mode other than `mode`.
    """
    if not isinstance(x, Moments):
        x = Moments.deterministic(x, mode or default_mode or "diagonal")
    if mode is not None and x.mode != mode:
        raise ValueError(f"`{name}` has mode {x.mode!r} but mode {mode!r} is required.")
    mean = to_float32(x.mean)
    if len(mean.shape) not in ranks:
        raise ValueError(
            f"`{name}` must have a mean of rank {' or '.join(map(str, ranks))}, "
            f"got shape {tuple(mean.shape)}."
        )
    if None in tuple(mean.shape)[1:]:
        raise ValueError(f"`{name}` needs static non-batch dimensions, got "
                         f"{tuple(mean.shape)}.")
    cov = x.cov
    if cov is not None:
        cov = to_float32(cov)
        n = int(np.prod(mean.shape[1:]))
        expected = tuple(mean.shape) if x.mode == "diagonal" else (mean.shape[0], n, n)
        if not compatible(cov.shape, expected):
            raise ValueError(
                f"`{name}` in mode {x.mode!r} with mean {tuple(mean.shape)} needs a "
                f"covariance of shape {expected}, got {tuple(cov.shape)}."
            )
    return Moments(mean, cov, x.mode)


def as_moments_pair(first, second, names, ranks=(2, 3)):
    """Two operands as Moments of one mode; a constant takes the other's mode.

    Raises:
        ValueError: naming both arguments if their modes differ, or naming
            one of them for a bad shape (see `as_moments`).
    """
    mode = next((x.mode for x in (first, second) if isinstance(x, Moments)), None)
    first = as_moments(first, names[0], ranks=ranks, default_mode=mode)
    second = as_moments(second, names[1], ranks=ranks, default_mode=mode)
    if first.mode != second.mode:
        raise ValueError(
            f"`{names[0]}` has mode {first.mode!r} but `{names[1]}` has mode "
            f"{second.mode!r}; convert one with `.as_mode(...)`."
        )
    return first, second


def unflatten_cov(cov, shape):
    """[B, N, N] -> [B, *shape, *shape] with N = prod(shape)."""
    return ops.reshape(cov, (-1, *shape, *shape))


def flatten_cov(cov, shape):
    """[B, *shape, *shape] -> [B, N, N]; inverse of `unflatten_cov`."""
    n = int(np.prod(shape))
    return ops.reshape(cov, (-1, n, n))


def add_covariances(*covs):
    """Sum of the covariances that are not None; None if all are."""
    present = [c for c in covs if c is not None]
    if not present:
        return None
    total = present[0]
    for cov in present[1:]:  # left to right, as tf.add_n sums
        total = total + cov
    return total


def diagonal_matrix(diagonal):
    """[..., n] -> [..., n, n] with `diagonal` on the diagonal, zeros elsewhere."""
    n = diagonal.shape[-1]
    return ops.where(ops.eye(n, dtype="bool"), diagonal[..., None], ops.zeros((), diagonal.dtype))


def set_diagonal(matrix, diagonal):
    """`matrix` [..., n, n] with its diagonal replaced by `diagonal` [..., n]."""
    n = diagonal.shape[-1]
    return ops.where(ops.eye(n, dtype="bool"), diagonal[..., None], matrix)

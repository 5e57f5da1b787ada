"""From a sequence of token moments to one vector per example.

A transformer regressor reads its prediction from one token (the last
position of a forecasting window) or from the average of all tokens (a
tabular model whose tokens are the features). Both maps are linear, so
their moments are exact: selecting a token keeps that token's block of
the covariance, averaging applies the averaging matrix on both sides.
"""

from keras import ops

from tfp_bnn import _validation as check

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import to_float32


def _check_sequence(x, name):
    if not isinstance(x, Moments):
        raise ValueError(f"`{name}` must be a tfp_bnn.moments.Moments, got {type(x).__name__}.")
    x = Moments(to_float32(x.mean), None if x.cov is None else to_float32(x.cov), x.mode)
    shape = tuple(x.mean.shape)
    if len(shape) != 3 or shape[1] is None or shape[2] is None:
        raise ValueError(f"`{name}` must hold a [B, J, I] mean with static J and I, "
                         f"got shape {shape}.")
    return x, shape[1], shape[2]


def select_token(x: Moments, index: int = -1) -> Moments:
    """Moments of x[:, index, :], shape [B, I] (exact).

    Args:
        x: `Moments` with mean [B, J, I].
        index: the token, -J <= index < J (default: the last one).

    Returns:
        `Moments` with mean [B, I], in the mode of `x`.

    Example:
    >>> x = Moments(np.arange(6.0).reshape([1, 3, 2]), np.ones([1, 3, 2]))
    >>> np.asarray(select_token(x).mean)
    array([[4., 5.]], dtype=float32)
    """
    x, num_tokens, width = _check_sequence(x, "x")
    index = check.integer("index", index, minimum=-num_tokens, maximum=num_tokens - 1)
    index %= num_tokens
    mean = x.mean[:, index, :]
    if x.cov is None:
        return Moments(mean, None, x.mode)
    if x.mode == "diagonal":
        return Moments(mean, x.cov[:, index, :], x.mode)
    start = index * width  # row-major flattening: token j owns rows j*I .. j*I + I - 1
    return Moments(mean, x.cov[:, start:start + width, start:start + width], x.mode)


def mean_over_tokens(x: Moments) -> Moments:
    """Moments of mean_j x[:, j, :], shape [B, I] (exact in full mode).

    Full mode: Cov = (1/J^2) sum_{j,k} C_jk over the [I, I] blocks, cross-token
    covariances included. Diagonal mode knows no cross-token covariance and
    takes it as zero: Var = (1/J^2) sum_j v_j.

    Args:
        x: `Moments` with mean [B, J, I].

    Returns:
        `Moments` with mean [B, I], in the mode of `x`.

    Example:
    >>> x = Moments(np.arange(6.0).reshape([1, 3, 2]), np.ones([1, 3, 2]))
    >>> pooled = mean_over_tokens(x)
    >>> np.asarray(pooled.mean), np.asarray(pooled.cov)   # variances 3 / 3^2
    (array([[2., 3.]], dtype=float32), array([[0.33333334, 0.33333334]], dtype=float32))
    """
    x, num_tokens, width = _check_sequence(x, "x")
    mean = ops.mean(x.mean, axis=1)
    if x.cov is None:
        return Moments(mean, None, x.mode)
    if x.mode == "diagonal":
        return Moments(mean, ops.sum(x.cov, axis=1) / float(num_tokens ** 2), x.mode)
    blocks = ops.reshape(x.cov, (-1, num_tokens, width, num_tokens, width))
    return Moments(mean, ops.sum(blocks, axis=(1, 3)) / float(num_tokens ** 2), x.mode)

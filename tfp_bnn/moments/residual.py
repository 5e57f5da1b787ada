"""The residual connection x + y on moments, with an optional cross-covariance.

    E[x + y]   = E[x] + E[y]
    Cov[x + y] = Cov[x] + Cov[y] + Cov[x, y] + Cov[x, y]^T

(seed 000, §4.5 and §4.6). The seed drops Cov[x, y], which is exact when
the branches are independent, e.g. the attention residual a + x of a
constant x (Cov[x] = 0). In a transformer block the branch is computed
from its input, so for a random input the cross term is not zero: `add`
takes it as `cross`, and `feed_forward_cross_covariance` gives it for
the feed-forward residual y + z, y = relu(z W1 + b1) W2 + b2 (§4.6),
whose input z is always random (the output of the first LayerNorm).

Feed-forward cross-covariance. W1, b1, W2, b2 are independent of z and of
each other, so the linear maps act on the covariance through their means
M1, M2 exactly (Cov[z W1, z] = M1^T Cov[z] per token pair). For the ReLU,
Stein's lemma gives Cov[relu(h_jk), w] = Phi_jk Cov[h_jk, w] for any w
jointly Gaussian with h_jk, Phi_jk = Phi(m_jk / s_jk) the expected slope
("exact" ReLU; 1[m_jk > 0] for "taylor"). Hence, treating h and z as
jointly Gaussian (the ReLU rule's own assumption) and the weights'
effect on the slopes as negligible (first order):

    Cov[y_j, z_k] = L_j C_z,jk,   L_j = M2^T diag(Phi_j) M1^T   [I, I]

for every token pair (j, k). Diagonal mode needs only the diagonal of
Cov[y_j, z_j] for a diagonal C_z:

    Cov[y_ji, z_ji] = v_z,ji sum_k M1[i, k] Phi_jk M2[k, i].

Full mode stays positive semi-definite: the propagated Cov[y] is at least
L C_z L^T (the weight-noise and ReLU terms only add to it), so the joint
covariance [[Cov[y], L C_z], [C_z L^T, C_z]] is at least [L; I] C_z [L; I]^T
plus a PSD part, and Cov[y + z] is a quadratic form of it.
"""

import tensorflow as tf

from tfp_bnn.moments.gaussian import Moments
from tfp_bnn.moments.gaussian import add_covariances
from tfp_bnn.moments.gaussian import as_moments
from tfp_bnn.moments.gaussian import as_moments_pair
from tfp_bnn.moments.gaussian import flatten_cov
from tfp_bnn.moments.gaussian import unflatten_cov


def add(x: Moments, y: Moments, cross=None) -> Moments:
    """Moments of x + y (either may be a constant).

    Args:
        x: Moments (or a constant tensor) with mean [B, J, I] or [B, I].
        y: Moments (or a constant tensor) of the same shape and mode.
        cross: Cov[x, y], or None for independent x and y. Mode "full":
            [B, N, N] with cross[b, u, v] = Cov[x_u, y_v] over the
            row-major flattening; mode "diagonal": Cov[x_u, y_u] in the
            shape of the mean.

    Returns:
        Moments of the sum; cov None if both are constants and `cross`
        is None.

    Raises:
        ValueError: naming `x` and `y` if their shapes or modes differ, or
            `cross` if its shape is wrong.
    """
    x, y = as_moments_pair(x, y, ("x", "y"))
    if not x.mean.shape.is_compatible_with(y.mean.shape):
        raise ValueError(
            f"`x` of shape {x.mean.shape} and `y` of shape {y.mean.shape} must "
            "have the same shape."
        )
    mean = x.mean + y.mean
    cov = add_covariances(x.cov, y.cov)
    if cross is not None:
        cross = tf.convert_to_tensor(cross, tf.float32)
        expected = (x.mean.shape if x.mode == "diagonal"
                    else tf.TensorShape([x.mean.shape[0], x.event_size, x.event_size]))
        if not cross.shape.is_compatible_with(expected):
            raise ValueError(
                f"`cross` must have shape {expected} in mode {x.mode!r}, got {cross.shape}."
            )
        both = 2.0 * cross if x.mode == "diagonal" else cross + tf.linalg.matrix_transpose(cross)
        cov = add_covariances(cov, both)
    return Moments(mean, cov, x.mode)


def feed_forward_cross_covariance(z: Moments, slope, kernel1_loc, kernel2_loc):
    """Cov[y, z] for y = relu(z W1 + b1) W2 + b2, to first order (see module).

    Args:
        z: Moments with mean [B, J, I] or [B, I], the input of the block.
        slope: [B, J, F] (or [B, F]), the expected ReLU slope Phi of each
            hidden unit (`tfp_bnn.moments.relu.rectified_gaussian`).
        kernel1_loc: [I, F], the mean of W1.
        kernel2_loc: [F, I], the mean of W2.

    Returns:
        None if `z` is a constant (the branches are then independent);
        else Cov[y, z] in the layout of `add`'s `cross`.
    """
    z = as_moments(z, "z")
    if z.cov is None:
        return None
    width = z.mean.shape[-1]
    tokens = z.mean.shape[1] if z.mean.shape.rank == 3 else 1
    slope = tf.reshape(tf.convert_to_tensor(slope, tf.float32), [-1, tokens, kernel1_loc.shape[1]])
    if z.mode == "diagonal":
        paired = tf.transpose(kernel1_loc) * kernel2_loc  # [F, I]: M1[i, k] M2[k, i]
        gain = tf.einsum("bjk,ki->bji", slope, paired)
        return z.cov * tf.reshape(gain, tf.shape(z.mean))
    maps = tf.einsum("ik,bjk,ka->bjai", kernel1_loc, slope, kernel2_loc)  # L_j [B, J, I, I]
    c = unflatten_cov(z.cov, (tokens, width))
    return flatten_cov(tf.einsum("bjai,bjikl->bjakl", maps, c), (tokens, width))

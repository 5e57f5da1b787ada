"""What the Monte Carlo parity suites share: draws, z-checks and the Gaussian KL.

Used by test_tfp_parity_dense.py, test_tfp_parity_conv.py,
test_tfp_parity_dense_variational.py and tests/layers/variational/test_dense_variational.py.
"""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions


def softplus_inverse(y):
    """log(exp(y) - 1) in float64, stable for small y."""
    y = np.asarray(y, np.float64)
    return y + np.log(-np.expm1(-y))


def draw_calls(layer, x, num_draws):
    """`num_draws` separate calls of `layer` on `x`, stacked, as float64.

    One call per draw, in one traced loop: the examples of one call are not
    independent (they share the kernel sample, or Flipout's perturbation); a
    given cell across calls is, which is what the standard errors assume.
    """
    x = tf.constant(x, tf.float32)

    @tf.function
    def loop():
        def body(i, draws):
            return i + 1, draws.write(i, layer(x))

        _, draws = tf.while_loop(lambda i, _: i < num_draws, body,
                                 (tf.constant(0), tf.TensorArray(tf.float32, size=num_draws)))
        return draws.stack()

    return loop().numpy().astype(np.float64)


def assert_within(name, estimate, target, standard_error, k):
    """Every |estimate - target| / standard_error is at most `k`."""
    z = np.abs(estimate - target) / standard_error
    assert np.all(z <= k), (
        f"{name}: max |z| = {z.max():.2f} > {k}\nestimate={estimate}\ntarget={target}\n"
        f"standard error={standard_error}"
    )


def normal_kl(loc, sigma, prior_loc, prior_scale):
    """Sum over entries of KL(N(loc, sigma^2) || N(m0, s0^2)), float64."""
    kl = (np.log(prior_scale / sigma)
          + (np.square(sigma) + np.square(loc - prior_loc)) / (2.0 * prior_scale**2) - 0.5)
    return float(np.sum(kl))


def normal_prior_fn(prior_loc, prior_scale):
    """N(prior_loc, prior_scale^2) on every weight, in TFP's `kernel_prior_fn` form.

    Same signature and structure as `tfp.layers.util.default_multivariate_normal_fn`.
    """

    def prior_fn(dtype, shape, name, trainable, add_variable_fn):
        del name, trainable, add_variable_fn  # a fixed prior has no variables
        dist = tfd.Normal(loc=tf.fill(shape, dtype.as_numpy_dtype(prior_loc)),
                          scale=dtype.as_numpy_dtype(prior_scale))
        return tfd.Independent(dist,
                               reinterpreted_batch_ndims=tf.size(dist.batch_shape_tensor()))

    return prior_fn

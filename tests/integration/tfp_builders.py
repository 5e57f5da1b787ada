"""TFP programs' own builder functions and kernel provider, as the tests port them.

Verbatim but for `tf.keras` -> `tf_keras` (and tf_keras' deprecated
`add_variable` -> `add_weight`): the regression notebook's
`posterior_mean_field`, `prior_trainable` and `RBFKernelFn`
(Probabilistic_Layers_Regression.ipynb), and keras.io's "Probabilistic
Bayesian Neural Networks" `prior` and `posterior`. Import after
`pytest.importorskip("tf_keras")`.
"""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras

tfd = tfp.distributions


# TFP's regression notebook.
def posterior_mean_field(kernel_size, bias_size=0, dtype=None):
    n = kernel_size + bias_size
    c = np.log(np.expm1(1.))
    return tf_keras.Sequential([
        tfp.layers.VariableLayer(2 * n, dtype=dtype),
        tfp.layers.DistributionLambda(lambda t: tfd.Independent(
            tfd.Normal(loc=t[..., :n], scale=1e-5 + tf.nn.softplus(c + t[..., n:])),
            reinterpreted_batch_ndims=1)),
    ])


def prior_trainable(kernel_size, bias_size=0, dtype=None):
    n = kernel_size + bias_size
    return tf_keras.Sequential([
        tfp.layers.VariableLayer(n, dtype=dtype),
        tfp.layers.DistributionLambda(lambda t: tfd.Independent(
            tfd.Normal(loc=t, scale=1), reinterpreted_batch_ndims=1)),
    ])


# keras.io's "Probabilistic Bayesian Neural Networks".
def keras_io_prior(kernel_size, bias_size, dtype=None):
    n = kernel_size + bias_size
    return tf_keras.Sequential([
        tfp.layers.DistributionLambda(
            lambda t: tfd.MultivariateNormalDiag(loc=tf.zeros(n), scale_diag=tf.ones(n))),
    ])


def keras_io_posterior(kernel_size, bias_size, dtype=None):
    n = kernel_size + bias_size
    return tf_keras.Sequential([
        tfp.layers.VariableLayer(tfp.layers.MultivariateNormalTriL.params_size(n), dtype=dtype),
        tfp.layers.MultivariateNormalTriL(n),
    ])


class RBFKernelFn(tf_keras.layers.Layer):
    """TFP's regression notebook's kernel provider (`add_variable` -> `add_weight`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        dtype = kwargs.get("dtype", None)
        self._amplitude = self.add_weight(initializer=tf.constant_initializer(0), dtype=dtype,
                                          name="amplitude")
        self._length_scale = self.add_weight(initializer=tf.constant_initializer(0),
                                             dtype=dtype, name="length_scale")

    def call(self, x):
        return x

    @property
    def kernel(self):
        return tfp.math.psd_kernels.ExponentiatedQuadratic(
            amplitude=tf.nn.softplus(0.1 * self._amplitude),
            length_scale=tf.nn.softplus(5. * self._length_scale))

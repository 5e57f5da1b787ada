"""Dense layer with Flipout: decorrelated weight noise per example."""

import keras
import tensorflow as tf
from keras import ops

from tfp_bnn.layers.base import rademacher
from tfp_bnn.layers.dense_base import BayesianDenseBase


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseFlipout(BayesianDenseBase):
    """Densely connected layer with Flipout weight noise (Wen et al., 2018).

    Keras 3 counterpart of `tfp.layers.DenseFlipout`. With the posterior
    w = loc + delta, delta = softplus(rho) * eps, one eps is drawn per call and
    each example n gets the perturbation delta * (s_n r_n^T) through random
    sign vectors s_n (inputs) and r_n (outputs):

        y_n = x_n @ loc + ((x_n * s_n) @ delta) * r_n

    Every example sees a kernel distributed as q(w), yet the examples'
    perturbations are uncorrelated, which lowers gradient variance at the
    price of a second matmul. Inputs of rank > 2 get signs per position, as
    in TFP. The KL term is computed as in `DenseReparameterization`; the
    Monte Carlo estimator uses one extra posterior sample.

    Args:
        units: positive int, the output dimension.
        **kwargs: every argument of `keras.layers.Dense` plus `posterior`
            (location-scale only), `prior`, `kl_weight`, `kl_estimator`,
            `bayesian_bias`, `seed` (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> model = keras.Sequential([keras.Input((8,)), DenseFlipout(16, activation="relu"),
    ...                           DenseFlipout(1)])
    """

    def __init__(self, units, **kwargs):
        super().__init__(units, **kwargs)
        self._require_location_scale()

    def call(self, inputs, training=None):
        inputs = ops.cast(inputs, self.compute_dtype)
        dtype = self.compute_dtype
        noise = self._noise_scale(training)
        loc, scale = self.posterior.loc_scale(self.kernel_params)
        outputs = ops.matmul(inputs, tf.cast(loc, dtype))
        eps = keras.random.normal(tuple(loc.shape), dtype=dtype, seed=self.seed_generator)
        delta = tf.cast(scale, dtype) * eps
        sign_in = rademacher(tf.shape(inputs), dtype, self.seed_generator)
        sign_out = rademacher(tf.shape(outputs), dtype, self.seed_generator)
        perturbation = ops.matmul(inputs * sign_in, delta) * sign_out
        outputs = outputs + perturbation * noise
        bias, bias_sample = self._bias_value(noise)
        self._add_kl(inputs, training, None, bias_sample)
        return self._finish(outputs, bias)

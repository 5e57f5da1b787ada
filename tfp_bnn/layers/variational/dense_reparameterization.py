"""Dense layer with a sampled kernel: the reparameterization estimator."""

import keras
from keras import ops

from tfp_bnn.layers.variational._dense_base import BayesianDenseBase


def reparameterization_call(layer, inputs, training):
    """One kernel sample w ~ q shared by the batch (Blundell et al. 2015, sec. 3.2).

    y = activation(x (*) w + b) with w = mean + perturbation, (*) the layer's
    matmul or convolution; adds kl_weight * KL at that sample. Used by every
    reparameterization layer (Dense and Conv1D/2D/3D).
    """
    noise_scale = layer._noise_scale(training)
    seeds = layer._call_seeds()
    draw = layer._draw(layer.kernel_params, seeds[0])
    mean = ops.cast(layer.posterior.mean(draw.prepared), layer.compute_dtype)
    kernel = mean + layer._scaled(draw.perturbation, noise_scale)
    bias, bias_draw = layer._bias_value(noise_scale, seeds[1])
    layer._add_kl(inputs, training, draw, bias_draw)
    return layer._finish(layer._apply_kernel(inputs, kernel), bias)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseReparameterization(BayesianDenseBase):
    """Densely connected layer whose kernel is a random variable.

    Keras 3 counterpart of TFP's `DenseReparameterization` (tf_keras only). Each call
    draws one kernel w = loc + softplus(rho) * eps (Blundell et al. 2015, sec. 3.2) that
    the whole batch shares, computes `activation(inputs @ w + bias)`, and adds
    kl_weight * KL(q(w) || p(w)) to the layer's losses.

    Args:
        units: positive int, the output dimension.
        **kwargs: every argument of `keras.layers.Dense` plus `posterior`,
            `prior`, `kl_weight`, `kl_estimator`, `bayesian_bias`, `seed`
            (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> layer = DenseReparameterization(4, kl_weight=1 / 1000, seed=0)
    >>> layer(keras.ops.ones((2, 3))).shape
    TensorShape([2, 4])
    """

    def _variational_call(self, inputs, training):
        return reparameterization_call(self, inputs, training)

"""Dense layer with a sampled kernel: the reparameterization estimator."""

import keras

from tfp_bnn.layers._dense_base import BayesianDenseBase


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseReparameterization(BayesianDenseBase):
    """Densely connected layer whose kernel is a random variable.

    Keras 3 counterpart of TFP's `DenseReparameterization` (tf_keras only). Each call
    draws one kernel w = loc + softplus(rho) * eps (seed 002, sec. 3.2) that
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
        return self._reparameterization_call(inputs, training)

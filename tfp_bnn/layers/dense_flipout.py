"""Dense layer with Flipout: decorrelated weight noise per example."""

import keras

from tfp_bnn.layers._dense_base import BayesianDenseBase


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseFlipout(BayesianDenseBase):
    """Densely connected layer with Flipout weight noise (Wen et al., 2018).

    Keras 3 counterpart of TFP's `DenseFlipout` (tf_keras only). With the posterior
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

    def _variational_call(self, inputs, training):
        return self._flipout_call(inputs, training)

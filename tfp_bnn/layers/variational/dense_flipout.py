"""Dense layer with Flipout: decorrelated weight noise per example."""

import keras
from keras import ops

from tfp_bnn import noise
from tfp_bnn.layers.variational._dense_base import BayesianDenseBase


def signs_per_position(inputs, outputs):
    """Shapes of Flipout's input and output sign tensors: one sign per entry."""
    return noise.shape_of(inputs), noise.shape_of(outputs)


def flipout_call(layer, inputs, training, sign_shapes=signs_per_position):
    """y = x (*) loc + ((x * s) (*) delta) * r, delta = scale * eps (Wen et al. 2018).

    (*) is the layer's matmul or convolution; `sign_shapes(inputs, outputs)`
    gives the shapes of the random sign tensors s and r (per position for
    Dense, per example and channel for Conv). Used by every Flipout layer.
    """
    dtype = layer.compute_dtype
    noise_scale = layer._noise_scale(training)
    seeds = layer._call_seeds()
    draw = layer._draw(layer.kernel_params, seeds[0])
    loc, _ = layer.posterior.loc_scale(draw.prepared)
    outputs = layer._apply_kernel(inputs, ops.cast(loc, dtype))
    in_shape, out_shape = sign_shapes(inputs, outputs)
    sign_in = noise.signs(in_shape, dtype, seeds[2])
    sign_out = noise.signs(out_shape, dtype, seeds[3])
    perturbation = layer._apply_kernel(inputs * sign_in, draw.perturbation) * sign_out
    outputs = outputs + layer._scaled(perturbation, noise_scale)
    bias, bias_draw = layer._bias_value(noise_scale, seeds[1])
    layer._add_kl(inputs, training, draw, bias_draw)
    return layer._finish(outputs, bias)


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

    requires_location_scale = True

    def _variational_call(self, inputs, training):
        return flipout_call(self, inputs, training)

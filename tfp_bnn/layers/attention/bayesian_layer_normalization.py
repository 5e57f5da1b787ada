"""Layer normalization whose gain and shift are random variables."""

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers.variational._estimators import reparameterization_call
from tfp_bnn.layers._shapes import fix_last_dim


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BayesianLayerNormalization(BayesianLayer):
    """Layer normalization (Ba et al. 2016) with a Gaussian gain and shift.

    Normalises each position over its last axis and applies a random gain
    g [d] (the layer's "kernel") and a random shift b [d] (its bias):

        z_i = g_i * (a_i - mu) / sqrt(sigma^2 + epsilon) + b_i,

    mu and sigma^2 the mean and variance of a over the last axis, computed in
    float32 whatever the compute dtype. Each call draws one (g, b) ~ q shared
    by the batch (reparameterization, Blundell et al. 2015, sec. 3.2) and adds
    kl_weight * KL(q || p) of both to the layer's losses. Inside
    `tfp_bnn.predict` the gain and shift samples s meet tile s by
    broadcasting. A `BayesianTransformerBlock` holds two of these layers
    (G^1, B^1 and G^2, B^2).

    Args:
        axis: the normalised axis; only -1 (the last) is supported.
        epsilon: small float > 0 added to the variance, as in
            `keras.layers.LayerNormalization`.
        center: if True (default) the layer has the shift b; if False the
            output is g * normalised(a).
        kernel_initializer: initializer of the gain's posterior mean
            (default "ones").
        bias_initializer: initializer of the shift's posterior mean
            (default "zeros").
        bayesian_bias: if True (the default here) the shift gets a
            posterior and a prior like the gain; False makes it a
            deterministic weight.
        **kwargs: `kernel_regularizer`, `bias_regularizer`,
            `kernel_constraint`, `bias_constraint`, `posterior`, `prior`,
            `kl_weight`, `kl_estimator`, `seed` and the base layer's
            arguments (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: tensor of rank >= 2, last axis the normalised features.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of the inputs' shape.

    Example:
    >>> norm = BayesianLayerNormalization(kl_weight=1 / 1000, seed=0)
    >>> tuple(norm(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)
    """

    def __init__(self, axis=-1, epsilon=1e-3, center=True, kernel_initializer="ones",
                 bias_initializer="zeros", bayesian_bias=True, **kwargs):
        if isinstance(axis, (list, tuple)) and len(axis) == 1:
            axis = axis[0]
        if isinstance(axis, bool) or axis != -1:
            raise ValueError(
                f"`axis` must be -1 (normalisation over the last axis), got {axis!r}."
            )
        epsilon = _validation.positive("epsilon", epsilon)
        center = _validation.boolean("center", center)
        super().__init__(activation=None, use_bias=center, kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, bayesian_bias=bayesian_bias,
                         **kwargs)
        self.axis = -1
        self.epsilon = epsilon
        self.center = center
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        # As keras.layers.LayerNormalization: per position, the mask passes through.
        self.supports_masking = True

    def build(self, input_shape):
        dim = fix_last_dim(self, input_shape)
        self._build_weights((dim,), (dim,))

    def _normalize(self, inputs):
        # float32 statistics: a float16 variance of activations in the
        # hundreds overflows, and mean/variance lose digits in float16.
        x = ops.cast(inputs, "float32")
        mean, variance = ops.moments(x, axes=[-1], keepdims=True)
        normed = (x - mean) * ops.rsqrt(variance + self.epsilon)
        return ops.cast(normed, self.compute_dtype)

    def _apply_kernel(self, inputs, kernel):
        return self._normalize(inputs) * kernel

    def _variational_call(self, inputs, training):
        return reparameterization_call(self, inputs, training)

    def _apply_sampled_kernels(self, sliced, kernels):
        # [S, B, ..., d] inputs, [S, d] gains: gain s scales slice s.
        rank = len(sliced.shape)
        gains = ops.reshape(kernels, (-1, *[1] * (rank - 2), kernels.shape[-1]))
        return self._normalize(sliced) * gains

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.pop("activation")
        config["center"] = config.pop("use_bias")
        config.update({"axis": self.axis, "epsilon": self.epsilon})
        return config

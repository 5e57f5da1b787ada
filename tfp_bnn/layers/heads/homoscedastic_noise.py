"""A learned noise level shared by every example: the homoscedastic head."""


import keras
from keras import ops

from tfp_bnn import _validation


@keras.saving.register_keras_serializable(package="tfp_bnn")
class HomoscedasticNoise(keras.layers.Layer):
    """Appends one learned log noise variance per output to predicted means.

    A homoscedastic regression model has y = f(x) + eps, eps ~ N(0, sigma^2)
    with one sigma^2 for all inputs (1 / tau in Gal and Ghahramani
    2016). Learning s = log sigma^2 by maximum likelihood, alongside the
    weights, replaces the grid search over tau of the papers. The layer's
    output has the layout of `HeteroscedasticRegression`, [means, s], so the
    same loss (`tfp_bnn.losses.GaussianNLL`) and the same predictive
    (`tfp_bnn.predict.regression(output="mean_log_variance")`) serve both
    kinds of model; only here s does not depend on x.

    Args:
        initial_log_variance: finite number, the starting s (0: unit
            variance, right for a standardised target).
        **kwargs: base layer arguments (name, dtype, trainable).

    Call arguments:
        inputs: [..., units] predicted means.

    Returns:
        [..., 2 * units]: the means, then s broadcast over the batch.

    Example:
    >>> hidden = keras.Input((8,))
    >>> mean = tfp_bnn.layers.DenseFlipout(1)(hidden)
    >>> outputs = HomoscedasticNoise()(mean)   # [batch, 2]
    >>> model = keras.Model(hidden, outputs)
    >>> model(np.zeros((3, 8), "float32"))[:, 1].numpy()   # s = 0 for every example
    array([0., 0., 0.], dtype=float32)
    """

    def __init__(self, initial_log_variance=0.0, **kwargs):
        super().__init__(**kwargs)
        self.initial_log_variance = _validation.number("initial_log_variance",
                                                       initial_log_variance)

    def build(self, input_shape):
        units = input_shape[-1]
        if units is None:
            raise ValueError("HomoscedasticNoise needs a known last dimension (the number "
                             f"of outputs), got input shape {tuple(input_shape)}.")
        self.log_variance = self.add_weight(
            name="log_variance", shape=(units,),
            initializer=keras.initializers.Constant(self.initial_log_variance))

    def call(self, inputs):
        noise = ops.broadcast_to(ops.cast(self.log_variance, inputs.dtype), ops.shape(inputs))
        return ops.concatenate([inputs, noise], axis=-1)

    def compute_output_shape(self, input_shape):
        units = input_shape[-1]
        return tuple(input_shape[:-1]) + (None if units is None else 2 * units,)

    def get_config(self):
        config = super().get_config()
        config.update({"initial_log_variance": self.initial_log_variance})
        return config

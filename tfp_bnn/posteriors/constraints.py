"""A Keras constraint that clips a weight to an interval (for a posterior's rho)."""

import keras

from tfp_bnn import _validation as check


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ClipValue(keras.constraints.Constraint):
    """Clips every value of a weight to [min_value, max_value] after each update.

    The serializable form of TFP's `lambda t: tf.clip_by_value(t, lo, hi)`,
    the `untransformed_scale_constraint` of its CIFAR-10 Bayesian ResNet and
    VGG examples, which keeps the posterior's untransformed scale rho, and so
    sigma = softplus(rho), from growing past a bound. Pass it as
    `MeanFieldNormal(untransformed_scale_constraint=ClipValue(...))`, or as
    any layer's `*_constraint`.

    Args:
        min_value: the lower bound.
        max_value: the upper bound, >= min_value.

    Returns:
        Called on a tensor, the clipped tensor.

    Example:
    >>> ClipValue(-1.0, 0.5)(np.array([-3.0, 0.0, 2.0], "float32")).numpy()
    array([-1. ,  0. ,  0.5], dtype=float32)
    """

    def __init__(self, min_value, max_value):
        self.min_value = check.number("min_value", min_value)
        self.max_value = check.number("max_value", max_value, low=self.min_value)

    def __call__(self, w):
        w = keras.ops.convert_to_tensor(w)
        return keras.ops.clip(w, keras.ops.cast(self.min_value, w.dtype),
                              keras.ops.cast(self.max_value, w.dtype))

    def get_config(self):
        return {"min_value": self.min_value, "max_value": self.max_value}

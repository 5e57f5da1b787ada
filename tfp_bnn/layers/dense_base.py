"""Shape handling shared by the variational Dense layers."""

import keras
import tensorflow as tf
from keras import ops

from tfp_bnn.layers.base import BayesianLayer


class BayesianDenseBase(BayesianLayer):
    """A `BayesianLayer` with the shapes and arguments of `keras.layers.Dense`.

    Acts on the last axis of inputs of rank >= 2, like `keras.layers.Dense`.
    """

    def __init__(self, units, **kwargs):
        if isinstance(units, bool) or not isinstance(units, int) or units <= 0:
            raise ValueError(f"`units` must be a positive int, got {units!r}.")
        super().__init__(**kwargs)
        self.units = units
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"{type(self).__name__} needs a known last input dimension, got "
                f"input shape {tuple(input_shape)}."
            )
        self._build_weights((input_dim, self.units), (self.units,))
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})

    def _apply_kernel(self, inputs, kernel):
        return ops.matmul(inputs, kernel)

    def _apply_sampled_kernels(self, sliced, kernels):
        # One batched matmul: [S, B*, in] @ [S, in, units], B* = all leading axes.
        shape = tf.shape(sliced)
        flat = tf.reshape(sliced, [shape[0], -1, shape[-1]])
        outputs = tf.matmul(flat, kernels)
        return tf.reshape(outputs, tf.concat([shape[:-1], [self.units]], axis=0))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        config["units"] = self.units
        return config

"""Shape handling shared by the variational Dense layers."""

import tensorflow as tf

from tfp_bnn.layers.base import BayesianLayer
from tfp_bnn.layers._shapes import DenseShapes


class BayesianDenseBase(DenseShapes, BayesianLayer):
    """A `BayesianLayer` with the shapes and arguments of `keras.layers.Dense`."""

    def build(self, input_shape):
        kernel_shape, bias_shape, _ = self._dense_shapes(input_shape)
        self._build_weights(kernel_shape, bias_shape)

    def _apply_sampled_kernels(self, sliced, kernels):
        # One batched matmul: [S, B*, in] @ [S, in, units], B* = all leading axes.
        shape = tf.shape(sliced)
        flat = tf.reshape(sliced, [shape[0], -1, shape[-1]])
        outputs = tf.matmul(flat, kernels)
        return tf.reshape(outputs, tf.concat([shape[:-1], [self.units]], axis=0))

"""Shape handling shared by the variational Dense layers."""

from keras import ops

from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers._shapes import DenseShapes


class BayesianDenseBase(DenseShapes, BayesianLayer):
    """A `BayesianLayer` with the shapes and arguments of `keras.layers.Dense`."""

    def build(self, input_shape):
        kernel_shape, bias_shape, _ = self._dense_shapes(input_shape)
        self._build_weights(kernel_shape, bias_shape)

    def _apply_sampled_kernels(self, sliced, kernels):
        # One batched matmul: [S, B*, in] @ [S, in, units], B* = all leading axes.
        shape = ops.shape(sliced)
        flat = ops.reshape(sliced, (shape[0], -1, shape[-1]))
        outputs = ops.matmul(flat, kernels)
        return ops.reshape(outputs, tuple(shape[:-1]) + (self.units,))

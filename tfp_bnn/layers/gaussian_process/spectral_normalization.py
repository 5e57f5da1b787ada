"""Spectral normalisation with SNGP's norm bound: `keras.layers.SpectralNormalization` plus c."""

import keras
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn.layers._mixed_precision import float32_variables

# Power-iteration steps per training call. The loop is unrolled into the traced
# training step (two matmuls with the kernel per step), so the graph grows with
# it; the vector u persists across calls, so one step per call (SNGP's and
# Keras' default) already converges over training, and 1000 steps shrink the
# error of a cold start by (sigma_2 / sigma_1)^2000: beyond that only the
# tracing time and the step time grow.
MAX_POWER_ITERATIONS = 1000


def _unit(vector):
    return vector / ops.maximum(ops.sqrt(ops.sum(ops.square(vector))), 1e-12)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class SpectralNormalization(keras.layers.SpectralNormalization):
    """Bounds the spectral norm of a layer's kernel by c (SNGP, Liu et al. 2020, eq. 7).

    `keras.layers.SpectralNormalization` (Miyato et al. 2018) always rescales the kernel
    to spectral norm 1: W <- W / sigma, sigma estimated by power iteration. SNGP bounds
    it instead, W <- W / max(1, sigma / c): a kernel already inside the bound is left
    alone, and c < 1 keeps a residual block x + g(x) distance preserving:
    (1 - c) |x - y| <= |h(x) - h(y)| <= (1 + c) |x - y| (Liu et al. 2020, sec. 3.1).
    Everything else is Keras's wrapper: in training calls the wrapped layer's kernel
    variable is normalised in place before the layer runs, with `power_iterations`
    steps per call on a persistent vector u. Inference calls use the kernel as it is:
    after `fit` that is the last normalised kernel plus the optimizer's last step, so
    its norm can exceed c by that step (and by the power iteration's estimate error).
    On JAX, whose trainer keeps the optimizer's kernel rather than the one a step
    normalised, inference calls normalise it (one power-iteration step from u).

    Under mixed precision the normalisation reads and writes the kernel in its own
    (float32) dtype; Keras's wrapper reads it autocast to float16 and so rounds the
    float32 master weights to float16 in every training call.

    Works on any layer with a `kernel` (Dense, Conv1D/2D/3D...) or `embeddings`. For a
    convolution the bound is on the reshaped [k * k * in, out] kernel matrix, as in
    Keras, not on the convolution operator's norm (edward2's `SpectralNormalizationConv2D`
    iterates with the convolution itself): with stride 1 every input pixel is in k * k
    patches, so the operator's norm is at most k c for a k x k kernel.
    `norm_multiplier=1` with a kernel above the bound is Keras's normalisation.

    Args:
        layer: the `keras.layers.Layer` to wrap.
        norm_multiplier: c > 0, the bound on the spectral norm (SNGP uses 0.95).
        power_iterations: positive int, power-iteration steps per training call,
            at most 1000 (the steps are unrolled into the traced training step).
        **kwargs: base `keras.layers.Wrapper` arguments.

    Call arguments:
        inputs: the wrapped layer's inputs.
        training: True normalises the kernel before the call.

    Returns:
        The wrapped layer's outputs.

    Raises:
        ValueError: for a bad `norm_multiplier` or `power_iterations`.

    Example:
    >>> dense = SpectralNormalization(keras.layers.Dense(64, activation="relu"),
    ...                               norm_multiplier=0.95)
    >>> dense(np.ones((2, 3), "float32")).shape
    TensorShape([2, 64])
    """

    def __init__(self, layer, norm_multiplier=0.95, power_iterations=1, **kwargs):
        power_iterations = _validation.integer("power_iterations", power_iterations,
                                               maximum=MAX_POWER_ITERATIONS)
        super().__init__(layer, power_iterations=power_iterations, **kwargs)
        self.norm_multiplier = _validation.positive("norm_multiplier", norm_multiplier)

    def normalized_weights(self, power_iterations=None):
        """The kernel scaled so that its spectral norm is at most c.

        sigma, the largest singular value of the kernel reshaped to
        [-1, out], is estimated by `power_iterations` steps from the stored
        vector u.

        Args:
            power_iterations: steps of the power iteration; None for the
                layer's `power_iterations`.

        Returns:
            (new u, W / max(1, sigma / c)), c the `norm_multiplier`; the
            caller stores u during training.
        """
        steps = self.power_iterations if power_iterations is None else power_iterations
        matrix = ops.reshape(self.kernel, [-1, self.kernel_shape[-1]])
        u = self.vector_u.value
        for _ in range(steps):
            v = _unit(ops.matmul(u, ops.transpose(matrix)))
            u = _unit(ops.matmul(v, matrix))
        u, v = ops.stop_gradient(u), ops.stop_gradient(v)
        sigma = ops.sum(ops.matmul(v, matrix) * u)
        scale = ops.maximum(1.0, sigma / self.norm_multiplier)
        kernel = ops.reshape(self.kernel / ops.cast(scale, self.kernel.dtype), self.kernel_shape)
        return ops.cast(u, self.vector_u.dtype), ops.cast(kernel, self.kernel.dtype)

    def call(self, inputs, training=False):
        # The wrapped layer's own call still autocasts (it enters its own scope).
        with float32_variables():
            if training or not _backend.is_jax():
                # Keras' wrapper: assigns u and the normalised kernel. Inside the
                # JAX trainer's jitted step u, non-trainable, is carried out of it;
                # the kernel, trainable, holds its normalised value for this step's
                # forward pass only (the gradient flows through W / sigma(W), as in
                # Miyato et al. 2018), and the optimizer then updates the stored W.
                return super().call(inputs, training=training)
            return self._normalized_call(inputs)

    def _normalized_call(self, inputs):
        """The wrapped layer on W / max(1, sigma / c), the stored W left as it is.

        On JAX the stored kernel is the one the optimizer updates, not the
        normalised one the training steps ran on (see `call`), so inference
        normalises it too, with sigma from one power-iteration step on the
        stored u (which stays unchanged): the bound holds at inference as in
        training, and a kernel inside the bound is used as it is.
        """
        raw = self.kernel.value
        self.kernel.assign(self.normalized_weights(power_iterations=1)[1])
        try:
            output = self.layer(inputs)
        finally:
            self.kernel.assign(raw)
        return ops.cast(output, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config["norm_multiplier"] = self.norm_multiplier
        return config

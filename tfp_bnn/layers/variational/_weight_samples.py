"""Many posterior weight samples in one call, for Monte Carlo prediction.

Inside a `_tracing.sample_trace` block (`tfp_bnn.predict`) a model's inputs
arrive tiled S times, sample-major ([S * B, ...], row s * B + b), and each
variational layer applies weight sample s to slice s: one traced call
computes S forward passes.
"""

from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn.layers._mixed_precision import float32_variables


class WeightSampling:
    """Mixin of `BayesianLayer`: draws S weight samples and applies them per slice."""

    def predictive_samples(self, num_samples):
        """S independent posterior samples of this layer's random weights.

        Returns a tuple (kernels [S, *kernel_shape], biases [S, units] or
        None), in the compute dtype; in mean mode every sample is the
        posterior mean. Used by `tfp_bnn.predict`, which draws them once and
        passes them to the calls of a `sample_trace` block.
        """
        with float32_variables():
            noise_scale = self._noise_scale(False)
            seeds = self._call_seeds()
            kernels = self._sample_n(self.kernel_params, num_samples, seeds[0], noise_scale)
            biases = None
            if self.bias_params is not None:
                biases = self._sample_n(self.bias_params, num_samples, seeds[1], noise_scale)
            return kernels, biases

    def _sample_n(self, params, num_samples, seed, noise_scale):
        prepared = self.posterior.prepare(params)
        return self.posterior.sample_n(prepared, num_samples, seed, self.compute_dtype,
                                       noise_scale)

    def _sampled_call(self, inputs, context):
        """inputs tiled [S * B, ...] sample-major; slice s uses weight sample s."""
        num_samples = context.num_samples
        draws = context.draws.get(id(self))
        if draws is None:
            draws = self.predictive_samples(num_samples)
        kernels, biases = draws
        sliced = ops.reshape(inputs, (num_samples, -1) + tuple(ops.shape(inputs)[1:]))
        outputs = self._apply_sampled_kernels(sliced, kernels)
        if biases is not None:
            rank = len(outputs.shape)
            outputs = outputs + ops.reshape(biases, self._sampled_bias_shape(rank, num_samples))
        elif self.use_bias:
            outputs = outputs + self._shape_bias(ops.cast(self.bias, self.compute_dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return ops.reshape(outputs, (-1,) + tuple(ops.shape(outputs)[2:]))

    def _apply_sampled_kernels(self, sliced, kernels):
        """[S, B, ...] inputs, [S, *kernel_shape] kernels -> [S, B, ...] outputs."""
        if _backend.is_jax():
            return ops.vectorized_map(lambda pair: self._apply_kernel(pair[0], pair[1]),
                                      (sliced, kernels))
        dtype = self.compute_dtype
        return tf.map_fn(
            lambda pair: self._apply_kernel(pair[0], pair[1]),
            (sliced, kernels),
            fn_output_signature=tf.TensorSpec(None, dtype),
        )

    def _sampled_bias_shape(self, rank, num_samples):
        """Shape that broadcasts [S, units] biases against [S, B, ...] outputs."""
        return [num_samples] + [1] * (rank - 2) + [-1]

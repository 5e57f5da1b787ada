"""Embedding layer with a sampled embedding matrix: the reparameterization estimator."""

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers.variational._estimators import reparameterization_call
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers._tracing import sample_context

# The arguments of `BayesianLayer` an embedding has no use for: it adds no
# bias and applies no activation, and its initializer, regularizer and
# constraint are `embeddings_*` in its config, as in `keras.layers.Embedding`.
_UNUSED = ("activation", "use_bias", "kernel_initializer", "bias_initializer",
           "kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint",
           "bayesian_bias")


@keras.saving.register_keras_serializable(package="tfp_bnn")
class EmbeddingReparameterization(BayesianLayer):
    """Turns indices into dense vectors looked up in a sampled embedding matrix.

    The Bayesian counterpart of `keras.layers.Embedding`, as bayesian-torch's
    `EmbeddingReparameterization` is of `torch.nn.Embedding`: the matrix E
    ([input_dim, output_dim]) has the posterior q(E), one E ~ q is drawn per
    call and shared by the batch (Blundell et al., 2015, "Weight Uncertainty
    in Neural Networks", ICML, sec. 3.2), and kl_weight * KL(q || p) over the
    whole matrix enters the loss once per forward pass, however often the
    layer is called (see `tfp_bnn.layers.BayesianLayer`).

    Deviations from `keras.layers.Embedding`: no `weights=` (set the
    posterior's variables after `build`), no LoRA and no quantization. The
    posterior variables are named `embeddings_loc`, `embeddings_rho` (for
    the mean-field posterior); `embeddings_posterior.mean()` is the matrix a
    deterministic `Embedding` would hold.

    Args:
        input_dim: int > 0, the vocabulary size (largest index + 1).
        output_dim: int > 0, the embedding dimension.
        embeddings_initializer: initializer of the posterior mean of the
            embedding matrix, as in `keras.layers.Embedding` (default
            "uniform").
        embeddings_regularizer: regularizer of the posterior mean.
        embeddings_constraint: constraint on the posterior mean.
        mask_zero: bool; index 0 is padding and gives a mask, as in
            `keras.layers.Embedding` (then `input_dim` counts index 0 too).
        posterior: a `tfp_bnn.posteriors.Posterior`, its name, or None for
            `MeanFieldNormal()` (see `tfp_bnn.layers.BayesianLayer`).
        prior: a `tfp_bnn.priors.Prior`, its name, or None for N(0, 1).
        kl_weight: the weight of the KL in the loss, >= 0, usually 1/N.
        kl_estimator: "analytic", "mc" or "auto".
        seed: int or None; seeds the weight noise and the initial weights.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            `activity_regularizer`, ...).

    Call arguments:
        inputs: integer tensor of any shape (floats are cast to int32).
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape + (output_dim,)`.

    Example:
    >>> model = keras.Sequential([keras.Input((None,), dtype="int32"),
    ...     EmbeddingReparameterization(1000, 16, mask_zero=True),
    ...     keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    >>> model(np.array([[5, 17, 0, 0], [3, 0, 0, 0]])).shape   # 0 pads
    TensorShape([2, 1])
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False,
                 posterior=None, prior=None, kl_weight=None, kl_estimator="auto", seed=None,
                 **kwargs):
        input_dim = _validation.integer("input_dim", input_dim)
        output_dim = _validation.integer("output_dim", output_dim)
        super().__init__(
            use_bias=False, kernel_initializer=embeddings_initializer,
            kernel_regularizer=embeddings_regularizer, kernel_constraint=embeddings_constraint,
            posterior=posterior, prior=prior, kl_weight=kl_weight, kl_estimator=kl_estimator,
            seed=seed, **kwargs)
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.mask_zero = _validation.boolean("mask_zero", mask_zero)
        self.supports_masking = self.mask_zero

    def build(self, input_shape=None):
        self.kernel_params, self._kernel_prior_built = self._variational_weight(
            "embeddings", (self.input_dim, self.output_dim), self.kernel_initializer,
            self.kernel_regularizer, self.kernel_constraint, self.seed)

    # q(E) and p(E) under Keras's name for the weight: `tfd.Distribution`s with
    # event shape [input_dim, output_dim] (None unbuilt).
    embeddings_posterior = BayesianLayer.kernel_posterior
    embeddings_prior = BayesianLayer.kernel_prior

    def call(self, inputs, training=None):
        # Indices stay integers (`BayesianLayer.call` would cast them to floats).
        if not str(inputs.dtype).startswith(("int", "uint")):
            inputs = ops.cast(inputs, "int32")
        with float32_variables():
            context = sample_context()
            if context is not None and not training:
                return self._sampled_call(inputs, context)
            return reparameterization_call(self, inputs, training)

    def _apply_kernel(self, inputs, kernel):
        return ops.take(kernel, inputs, axis=0)

    def _apply_sampled_kernels(self, sliced, kernels):
        # [S, B, ...] indices into [S, input_dim, output_dim]: one gather per sample.
        if _backend.is_jax():
            # The lookup vectorized over the samples (`WeightSampling`'s JAX path).
            return super()._apply_sampled_kernels(sliced, kernels)
        return tf.gather(kernels, sliced, batch_dims=1)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        for key in _UNUSED:
            config.pop(key, None)
        config.update({
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": keras.initializers.serialize(self.kernel_initializer),
            "embeddings_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "embeddings_constraint": keras.constraints.serialize(self.kernel_constraint),
            "mask_zero": self.mask_zero,
        })
        return config

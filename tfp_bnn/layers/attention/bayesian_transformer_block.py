"""A post-norm transformer encoder block whose weights are Gaussian."""


import keras
from keras import ops

from tfp_bnn import _keras_internals
from tfp_bnn import _validation
from tfp_bnn.layers.attention import _composite
from tfp_bnn.layers.variational.base import variational_config
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.layers.attention.bayesian_multi_head_attention import check_attention_shapes

# Sublayer seed slots (times _composite.SEED_STRIDE): the attention takes
# slots 0-4 (four projections and its dropout), then the rest of the block.
_SEEDS = {"attention": 0, "norm1": 5, "ffn1": 6, "ffn2": 7, "norm2": 8, "dropout": 9}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BayesianTransformerBlock(keras.layers.Layer):
    """One transformer block (Vaswani et al. 2017) with Gaussian weights.

    Post-norm, as in the original transformer:

        A = MultiHeadAttention(X, X, X)          W^Q_h, W^K_h, W^V_h, W^O
        Z = LayerNorm_1(X + dropout(A))          G^1, B^1
        Y = W^F2 ReLU(W^F1 Z)                    W^F1, W^F2
        output = LayerNorm_2(Z + dropout(Y))     G^2, B^2

    Every one of those parameters has a posterior and a prior: the attention
    is a `BayesianMultiHeadAttention`, the feed-forward layers are variational
    Dense layers and the normalisations are `BayesianLayerNormalization`
    (random gain and shift). Each adds its own KL term, so the block adds
    eight. Dropout (on the attention probabilities and on the two residual
    branches) acts in training only.

    Args:
        num_heads: positive int H.
        ff_dim: positive int, the hidden width of the feed-forward layers.
        key_dim: positive int K; default width // num_heads (the width
            must then be divisible by num_heads).
        value_dim: positive int, the value head size (default K).
        dropout: rate in [0, 1), in training only.
        epsilon: the normalisations' variance epsilon, > 0.
        estimator: "reparameterization" or "flipout", the class of the
            attention projections and feed-forward layers (the
            normalisations always use reparameterization).
        posterior: the posterior of every sublayer's weights (see
            `tfp_bnn.layers.BayesianLayer`).
        prior: the prior of every sublayer's weights.
        kl_weight: the weight of each sublayer's KL, usually 1/N.
        kl_estimator: "analytic", "mc" or "auto", for every sublayer.
        bayesian_bias: whether the attention and feed-forward biases are
            random (the normalisations' shifts always are).
        seed: int or None; the sublayers get distinct seeds derived from it.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [B, T, width] tensor.
        attention_mask: boolean [B, T, T] (or [T, T]), True where a position
            may attend to another.
        training: True draws weight noise and applies dropout.
        use_causal_mask: also mask positions after each query.
        mask: boolean [B, T] padding mask, True at real positions; Keras
            passes the inputs' own mask (e.g. from `Embedding(mask_zero=True)`).
            Padded positions are neither attended to nor attend; the output
            carries the mask.

    Returns:
        [B, T, width] tensor.

    Example:
    >>> block = BayesianTransformerBlock(num_heads=2, ff_dim=16, kl_weight=1 / 1000)
    >>> tuple(block(keras.ops.ones((4, 6, 8))).shape)
    (4, 6, 8)
    """

    def __init__(self, num_heads, ff_dim, key_dim=None, value_dim=None, dropout=0.0,
                 epsilon=1e-3, estimator="reparameterization", posterior=None, prior=None,
                 kl_weight=None, kl_estimator="auto", bayesian_bias=False, seed=None,
                 **kwargs):
        self.num_heads = _validation.integer("num_heads", num_heads)
        self.ff_dim = _validation.integer("ff_dim", ff_dim)
        self._key_dim_arg = _validation.integer("key_dim", key_dim, allow_none=True)
        self.value_dim = _validation.integer("value_dim", value_dim, allow_none=True)
        self.dropout = _validation.number("dropout", dropout, low=0, high=1, high_open=True)
        self.epsilon = _validation.positive("epsilon", epsilon)
        self.estimator = estimator
        variational = _composite.variational_arguments(
            estimator, posterior, prior, kl_weight, kl_estimator, bayesian_bias, seed)
        super().__init__(**kwargs)
        _composite.set_variational_attributes(self, variational)
        self.key_dim = self._key_dim_arg
        self.seed_generator = None
        if self.dropout > 0:
            self.seed_generator = keras.random.SeedGenerator(self._seed("dropout"))
        self.attention = None
        self.norm1 = None
        self.ffn1 = None
        self.ffn2 = None
        self.norm2 = None
        # Positions stay positions: the input's padding mask is the output's.
        self.supports_masking = True

    def _seed(self, part):
        return _composite.sub_seed(self.seed, _SEEDS[part])

    def _variational(self, part):
        return {
            "posterior": self.posterior,
            "prior": self.prior,
            "kl_weight": self._initial_kl_weight,
            "kl_estimator": self.kl_estimator,
            "seed": self._seed(part),
            "dtype": self.dtype_policy,
            "name": f"{self.name}_{part}",
        }

    def _check_input_shape(self, inputs_shape):
        shape = tuple(inputs_shape)
        if len(shape) != 3 or shape[-1] is None:
            raise ValueError(
                f"`inputs` must have rank 3 [batch, length, width] with a known width, got "
                f"shape {shape}."
            )
        width = shape[-1]
        if self._key_dim_arg is None and width % self.num_heads:
            raise ValueError(
                f"The input width ({width}) must be divisible by `num_heads` "
                f"({self.num_heads}) when `key_dim` is None; pass `key_dim`."
            )
        return shape

    def build(self, inputs_shape, attention_mask_shape=None):
        shape = self._check_input_shape(inputs_shape)
        check_attention_shapes(shape, shape, shape, attention_mask_shape)
        width = shape[-1]
        self.key_dim = self._key_dim_arg or width // self.num_heads
        dense = _composite.dense_class(self.estimator)
        self.attention = BayesianMultiHeadAttention(
            self.num_heads, self.key_dim, value_dim=self.value_dim, dropout=self.dropout,
            output_shape=width, estimator=self.estimator, bayesian_bias=self.bayesian_bias,
            **self._variational("attention"))
        self.norm1 = BayesianLayerNormalization(epsilon=self.epsilon,
                                                **self._variational("norm1"))
        self.ffn1 = dense(self.ff_dim, activation="relu", bayesian_bias=self.bayesian_bias,
                          **self._variational("ffn1"))
        self.ffn2 = dense(width, bayesian_bias=self.bayesian_bias,
                          **self._variational("ffn2"))
        self.norm2 = BayesianLayerNormalization(epsilon=self.epsilon,
                                                **self._variational("norm2"))
        self.attention.build(shape, shape)
        self.norm1.build(shape)
        self.ffn1.build(shape)
        self.ffn2.build(shape[:-1] + (self.ff_dim,))
        self.norm2.build(shape)

    def call(self, inputs, attention_mask=None, training=None, use_causal_mask=False,
             mask=None):
        if mask is None:  # Keras fills `mask` only when `inputs` is the one tensor argument
            mask = _keras_internals.get_keras_mask(inputs)
        inputs = ops.convert_to_tensor(inputs)
        self._check_input_shape(inputs.shape)
        # The padding mask enters the attention as query and key mask, as
        # the inputs' own mask would enter a keras.layers.MultiHeadAttention.
        attended = self.attention(inputs, inputs, query_mask=mask, value_mask=mask,
                                  attention_mask=attention_mask, training=training,
                                  use_causal_mask=use_causal_mask)
        attended = _composite.dropout(attended, self.dropout, self.seed_generator, training)
        z = self.norm1(inputs + ops.cast(attended, inputs.dtype), training=training)
        y = self.ffn2(self.ffn1(z, training=training), training=training)
        y = _composite.dropout(y, self.dropout, self.seed_generator, training)
        return self.norm2(z + y, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def moment_parameters(self):
        """The posterior moments of every random weight, by the names above.

        Returns:
            dict with keys "query", "key", "value", "output" (the attention
            projections), "norm1", "ffn1", "ffn2", "norm2", each the
            sublayer's `posterior_moments()`: (kernel_loc, kernel_var,
            bias_loc, bias_var) float32 tensors (variances 0 in mean mode).
            Layouts: query/key kernels [width, H*K] and the value kernel
            [width, H*Dv], head h in columns h*K:(h+1)*K (resp. Dv); output
            kernel [H*Dv, width], rows in the same head-major order; ffn1
            [width, ff_dim]; ffn2 [ff_dim, width]; norm gains and shifts
            [width]. A deterministic bias has variance 0; `H`, `K`, `Dv` are
            `attention.num_heads`, `attention.key_dim`, `attention.value_dim`.
            Read by `tfp_bnn.moments.transformer_block`.
        """
        if not self.built:
            raise ValueError("The block is not built; call it on data or build it first.")
        attention = self.attention
        return {
            "query": attention.query_dense.posterior_moments(),
            "key": attention.key_dense.posterior_moments(),
            "value": attention.value_dense.posterior_moments(),
            "output": attention.output_dense.posterior_moments(),
            "norm1": self.norm1.posterior_moments(),
            "ffn1": self.ffn1.posterior_moments(),
            "ffn2": self.ffn2.posterior_moments(),
            "norm2": self.norm2.posterior_moments(),
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "ff_dim": self.ff_dim,
                "key_dim": self._key_dim_arg,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "epsilon": self.epsilon,
                "estimator": self.estimator,
            }
        )
        config.update(variational_config(self))
        return config

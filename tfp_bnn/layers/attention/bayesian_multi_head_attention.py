"""Multi-head attention whose four projections are variational Dense layers."""

import math

import keras
from keras import ops

from tfp_bnn import _keras_internals
from tfp_bnn import _validation
from tfp_bnn.layers.attention import _composite
from tfp_bnn.layers.variational.base import variational_config
from tfp_bnn.layers._shapes import set_weight_arguments
from tfp_bnn.layers._shapes import weight_arguments_config


def _dims(shape):
    return None if shape is None else tuple(shape)


def check_attention_shapes(query_shape, value_shape, key_shape=None, mask_shape=None):
    """Validates static input and mask shapes of an attention call (None = unknown).

    Raises:
        ValueError naming `query`, `value`, `key` or `attention_mask`.
    """
    shapes = {"query": _dims(query_shape), "value": _dims(value_shape),
              "key": _dims(key_shape)}
    for name, shape in shapes.items():
        if shape is None:
            continue
        if len(shape) != 3:
            raise ValueError(
                f"`{name}` must have rank 3 [batch, length, features], got shape {shape}."
            )
        if shape[-1] is None:
            raise ValueError(f"`{name}` needs a known last dimension, got shape {shape}.")
    query, value, key = shapes["query"], shapes["value"], shapes["key"] or shapes["value"]
    if key[1] is not None and value[1] is not None and key[1] != value[1]:
        raise ValueError(
            f"`key` and `value` must have the same sequence length, got key shape {key} "
            f"and value shape {value}."
        )
    mask_shape = _dims(mask_shape)
    if mask_shape is None:
        return
    target = (query[0], query[1], key[1] if key[1] is not None else value[1])
    ok = len(mask_shape) in (2, 3) and all(
        m is None or t is None or m in (1, t)
        for m, t in zip(mask_shape[::-1], target[::-1])
    )
    if not ok:
        raise ValueError(
            "`attention_mask` must broadcast to [batch, query length, key length] = "
            f"{list(target)} (rank 3, or rank 2 [query length, key length]), got shape "
            f"{mask_shape}."
        )


def masked_softmax(scores, mask):
    """softmax over the last axis; masked (False) entries get probability 0.

    As in `keras.layers.Softmax`: masked scores become a large negative
    number before the softmax, and the probabilities are zeroed where the
    mask is False, so a fully masked row is all zeros rather than uniform.
    """
    if mask is None:
        return ops.softmax(scores, axis=-1)
    float16 = keras.backend.standardize_dtype(scores.dtype) == "float16"
    large_negative = -3e4 if float16 else -1e9
    scores = ops.where(mask, scores, ops.cast(large_negative, scores.dtype))
    return ops.where(mask, ops.softmax(scores, axis=-1), ops.cast(0.0, scores.dtype))


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BayesianMultiHeadAttention(keras.layers.Layer):
    """`keras.layers.MultiHeadAttention` with Gaussian projection weights.

    The per-head W^Q_h, W^K_h, W^V_h and the output W^O of a transformer
    block (Vaswani et al. 2017) are the kernels of four variational Dense layers,
    `query_dense`, `key_dense`, `value_dense` and `output_dense`; head h is
    columns h*K:(h+1)*K of a projection (head-major):

        Q_h = query @ W^Q[:, h*K:(h+1)*K] (+ b),  likewise K_h, V_h,
        A_h = softmax(Q_h K_h^T / sqrt(K) + mask) V_h,
        output = concat_h(A_h) @ W^O (+ b).

    The scores and their softmax are computed in float32 whatever the
    compute dtype (a float16 score overflows past 65504); the attention
    probabilities return to the compute dtype.

    Each projection adds its own kl_weight * KL to the losses, and obeys
    mean mode, `KLScheduler` and `tfp_bnn.predict` like any variational
    layer (this layer has no random weight of its own).

    Args:
        num_heads: positive int H.
        key_dim: positive int K, the size of each query and key head.
        value_dim: positive int, the size of each value head (default K).
        dropout: rate in [0, 1) of dropout on the attention probabilities,
            in training only.
        use_bias: whether the projections have biases.
        output_shape: positive int, the output's last dimension (default:
            the query's last dimension).
        kernel_initializer: initializer of every projection's kernel
            (posterior mean), as in `keras.layers.MultiHeadAttention`.
        bias_initializer: initializer of every projection's bias.
        kernel_regularizer: regularizer of the projections' kernel means.
        bias_regularizer: regularizer of the projections' biases.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the projections' kernel means.
        bias_constraint: constraint on the projections' biases.
        estimator: "reparameterization" (one weight sample per call) or
            "flipout" (decorrelated per-example noise): the class of the
            projections, `DenseReparameterization` or `DenseFlipout`.
        posterior: the projections' posterior (see
            `tfp_bnn.layers.BayesianLayer`), the same for all four.
        prior: the projections' prior.
        kl_weight: the weight of each projection's KL, usually 1/N.
        kl_estimator: "analytic", "mc" or "auto", for every projection.
        bayesian_bias: whether the projections' biases are variational.
        seed: int or None; the projections get distinct seeds derived from it.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        query: [B, Tq, dq] tensor.
        value: [B, Tk, dv] tensor.
        key: [B, Tk, dk] tensor (default: `value`).
        query_mask: boolean [B, Tq] padding mask of the query, True at
            real positions; Keras passes the inputs' own masks (e.g. from
            `Embedding(mask_zero=True)`) without being told. A padded query
            attends to nothing.
        value_mask: boolean [B, Tk] padding mask of the value; padded keys
            get weight 0.
        key_mask: boolean [B, Tk] padding mask of the key (default: the
            value's).
        attention_mask: boolean [B, Tq, Tk] (or [Tq, Tk], broadcast over the
            batch), True where a query may attend to a key. Every mask given
            is combined with AND, as in `keras.layers.MultiHeadAttention`.
        return_attention_scores: also return the attention probabilities
            [B, H, Tq, Tk] (before dropout).
        training: True draws weight noise and applies dropout.
        use_causal_mask: also mask keys after each query position.

    Returns:
        [B, Tq, output_shape] tensor carrying the query's mask, and the
        attention probabilities if `return_attention_scores`.

    Example:
    >>> mha = BayesianMultiHeadAttention(num_heads=2, key_dim=4, kl_weight=1 / 1000)
    >>> x = keras.ops.ones((3, 5, 8))
    >>> tuple(mha(x, x).shape)
    (3, 5, 8)
    """

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
                 output_shape=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 estimator="reparameterization", posterior=None, prior=None, kl_weight=None,
                 kl_estimator="auto", bayesian_bias=False, seed=None, **kwargs):
        self.num_heads = _validation.integer("num_heads", num_heads)
        self.key_dim = _validation.integer("key_dim", key_dim)
        self.value_dim = _validation.integer("value_dim", value_dim, allow_none=True)
        self.value_dim = self.value_dim or self.key_dim
        self._value_dim_arg = value_dim
        self.dropout = _validation.number("dropout", dropout, low=0, high=1, high_open=True)
        self.output_units = _validation.integer("output_shape", output_shape, allow_none=True)
        self.estimator = estimator
        variational = _composite.variational_arguments(
            estimator, posterior, prior, kl_weight, kl_estimator, bayesian_bias, seed)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        set_weight_arguments(self, None, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer, kernel_constraint,
                             bias_constraint)
        _composite.set_variational_attributes(self, variational)
        self.seed_generator = None
        if self.dropout > 0:
            self.seed_generator = keras.random.SeedGenerator(_composite.sub_seed(self.seed, 4))
        self.query_dense = None
        self.key_dense = None
        self.value_dense = None
        self.output_dense = None
        # As keras.layers.MultiHeadAttention: the query's mask is the output's.
        self.supports_masking = True

    def _projection(self, units, index, suffix):
        return _composite.dense_class(self.estimator)(
            units,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            posterior=self.posterior,
            prior=self.prior,
            kl_weight=self._initial_kl_weight,
            kl_estimator=self.kl_estimator,
            bayesian_bias=self.bayesian_bias,
            seed=_composite.sub_seed(self.seed, index),
            dtype=self.dtype_policy,
            name=f"{self.name}_{suffix}",
        )

    def __call__(self, query, value, key=None, *args, **kwargs):
        # Keras before 3.14 leaves every `*_mask` argument out of the shapes it
        # gives `build`, so a bad `attention_mask` would be caught only in
        # `call`, after the first call had built the weights: checked here,
        # before any work, on whatever version.
        if not self.built:
            check_attention_shapes(*(getattr(x, "shape", None)
                                     for x in (query, value, key, kwargs.get("attention_mask"))))
        return super().__call__(query, value, key, *args, **kwargs)

    def build(self, query_shape, value_shape, key_shape=None, attention_mask_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_attention_shapes(query_shape, value_shape, key_shape, attention_mask_shape)
        heads_k, heads_v = self.num_heads * self.key_dim, self.num_heads * self.value_dim
        self.query_dense = self._projection(heads_k, 0, "query")
        self.key_dense = self._projection(heads_k, 1, "key")
        self.value_dense = self._projection(heads_v, 2, "value")
        self.output_dense = self._projection(self.output_units or query_shape[-1], 3,
                                             "attention_output")
        self.query_dense.build(tuple(query_shape))
        self.key_dense.build(tuple(key_shape))
        self.value_dense.build(tuple(value_shape))
        self.output_dense.build(tuple(query_shape[:-1]) + (heads_v,))

    def _split_heads(self, x, size):
        """[B, T, H*size] -> [B, T, H, size], head h = columns h*size:(h+1)*size."""
        return ops.reshape(x, (*ops.shape(x)[:2], self.num_heads, size))

    def _merged_mask(self, query, value, attention_mask, use_causal_mask, query_mask=None,
                     value_mask=None, key_mask=None):
        """Boolean mask broadcastable to [B, 1, Tq, Tk], or None.

        The AND of every mask given, as in Keras' `MultiHeadAttention`: the
        query's padding mask [B, Tq] (a padded query attends to nothing, so
        its row is all zeros), the value's and key's [B, Tk], the causal
        mask and `attention_mask`.
        """
        masks = []
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            masks.append(mask[None] if len(mask.shape) == 2 else mask)
        if query_mask is not None:
            masks.append(ops.cast(query_mask, "bool")[:, :, None])
        for padding in (value_mask, key_mask):
            if padding is not None:
                masks.append(ops.cast(padding, "bool")[:, None, :])
        if use_causal_mask:
            rows = ops.arange(ops.shape(query)[1])[:, None]
            cols = ops.arange(ops.shape(value)[1])[None, :]
            masks.append((rows >= cols)[None])
        if not masks:
            return None
        mask = masks[0]
        for other in masks[1:]:
            mask = ops.logical_and(mask, other)
        return mask[:, None]

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
             attention_mask=None, return_attention_scores=False, training=None,
             use_causal_mask=False):
        # Keras fills value_mask and key_mask from the inputs' masks (e.g.
        # after Embedding(mask_zero=True)); the query's is read here, as in
        # keras.layers.MultiHeadAttention, unless given.
        if query_mask is None:
            query_mask = _keras_internals.get_keras_mask(query)
        query, value = ops.convert_to_tensor(query), ops.convert_to_tensor(value)
        key = value if key is None else ops.convert_to_tensor(key)
        if attention_mask is not None:
            attention_mask = ops.convert_to_tensor(attention_mask)
        check_attention_shapes(query.shape, value.shape, key.shape,
                               None if attention_mask is None else attention_mask.shape)
        mask = self._merged_mask(query, value, attention_mask, use_causal_mask, query_mask,
                                 value_mask, key_mask)
        q = self._split_heads(self.query_dense(query, training=training), self.key_dim)
        k = self._split_heads(self.key_dense(key, training=training), self.key_dim)
        v = self._split_heads(self.value_dense(value, training=training), self.value_dim)
        # Scores and softmax in float32 whatever the compute dtype: a float16
        # score overflows to inf once |q . k| / sqrt(K) > 65504 (projections
        # of a few hundred, e.g. under wide posteriors), and softmax(inf) is
        # NaN. The probabilities are in [0, 1] and go back to compute dtype.
        q = ops.cast(q, "float32") * (1.0 / math.sqrt(self.key_dim))
        scores = ops.einsum("bshk,bthk->bhts", ops.cast(k, "float32"), q)
        probabilities = ops.cast(masked_softmax(scores, mask), v.dtype)
        dropped = _composite.dropout(probabilities, self.dropout, self.seed_generator, training)
        context = ops.einsum("bhts,bshd->bthd", dropped, v)
        context = ops.reshape(context, (*ops.shape(context)[:2],
                                        self.num_heads * self.value_dim))
        outputs = self.output_dense(context, training=training)
        if query_mask is not None:
            _keras_internals.set_keras_mask(outputs, query_mask)
        if return_attention_scores:
            return outputs, probabilities
        return outputs

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        units = self.output_units or query_shape[-1]
        return tuple(query_shape[:-1]) + (units,)

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None,
                            key_mask=None, attention_mask=None, return_attention_scores=False,
                            training=None, use_causal_mask=False):
        key_shape = None if key is None else key.shape
        check_attention_shapes(query.shape, value.shape, key_shape,
                               None if attention_mask is None else attention_mask.shape)
        outputs = keras.KerasTensor(self.compute_output_shape(query.shape, value.shape),
                                    dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        scores = (query.shape[0], self.num_heads, query.shape[1], value.shape[1])
        return outputs, keras.KerasTensor(scores, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self._value_dim_arg,
                "dropout": self.dropout,
                "output_shape": self.output_units,
                "activity_regularizer": keras.regularizers.serialize(self.activity_regularizer),
                "estimator": self.estimator,
            }
        )
        weights = weight_arguments_config(self)
        del weights["activation"]  # the projections are linear; no such argument here
        config.update(weights)
        config.update(variational_config(self))
        return config

"""Sequence masks (Embedding(mask_zero=True)) pass through the layers whose Keras twins keep them.

Padding is token 0. Outputs at the real positions, and a masked average over
them, must not depend on how much padding follows; padded keys get zero
attention, as in `keras.layers.MultiHeadAttention`. Stochastic layers run in
mean mode so that two calls are comparable.
"""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import BayesianLayerNormalization
from tfp_bnn.layers import BayesianMultiHeadAttention
from tfp_bnn.layers import BayesianTransformerBlock
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import DenseVariational
from tfp_bnn.layers import MCDropout
from tfp_bnn.layers import NodeDense
from tests.layers.attention.test_bayesian_multi_head_attention import _posterior_means
from tests.layers.attention.test_bayesian_multi_head_attention import _random_posterior
from tests.layers.attention.test_bayesian_multi_head_attention import keras_attention

VOCAB, WIDTH = 12, 4
# Two sequences of 3 and 5 real tokens, padded with 0 to length 6.
TOKENS = np.array([[3, 5, 7, 0, 0, 0], [2, 9, 4, 8, 1, 0]], "int32")
REAL = TOKENS != 0


def _padded(length):
    return np.pad(TOKENS, ((0, 0), (0, length - TOKENS.shape[1])))


LAYERS = {
    "DenseFlipout": lambda: DenseFlipout(3, seed=0),
    "DenseReparameterization": lambda: DenseReparameterization(3, seed=0),
    "DenseLocalReparameterization": lambda: DenseLocalReparameterization(3, seed=0),
    "DenseVariational": lambda: DenseVariational(3, seed=0),
    "NodeDense": lambda: NodeDense(3, seed=0),
    "BayesianLayerNormalization": lambda: BayesianLayerNormalization(seed=0),
    "MCDropout": lambda: MCDropout(0.5, seed=0),
    "BayesianMultiHeadAttention": lambda: BayesianMultiHeadAttention(2, 2, seed=0),
    "BayesianTransformerBlock": lambda: BayesianTransformerBlock(2, 8, seed=0),
}


def _apply(layer, x):
    if isinstance(layer, BayesianMultiHeadAttention):
        return layer(x, x)
    return layer(x)


def _embedding():
    return keras.layers.Embedding(
        VOCAB, WIDTH, mask_zero=True,
        embeddings_initializer=keras.initializers.RandomNormal(seed=1))


def _model(layer):
    tokens = keras.Input((None,), dtype="int32")
    outputs = _apply(layer, _embedding()(tokens))
    pooled = keras.layers.GlobalAveragePooling1D()(outputs)
    model = keras.Model(tokens, [outputs, pooled])
    tfp_bnn.set_mean_mode(model, True)
    return model


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_real_positions_and_masked_pooling_ignore_padding(name):
    layer = LAYERS[name]()
    assert layer.supports_masking
    model = _model(layer)
    short, short_pooled = model(_padded(6))
    long, long_pooled = model(_padded(12))
    np.testing.assert_allclose(np.asarray(long)[:, :6][REAL], np.asarray(short)[REAL],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(long_pooled, short_pooled, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_eager_output_carries_the_input_mask(name):
    layer = LAYERS[name]()
    tfp_bnn.set_mean_mode(layer, True)
    x = _embedding()(TOKENS)
    outputs = _apply(layer, x)
    mask = getattr(outputs, "_keras_mask", None)
    assert mask is not None
    np.testing.assert_array_equal(mask, REAL)
    np.testing.assert_array_equal(layer.compute_mask(x, x._keras_mask), REAL)


def _attention_pair(seed=7):
    """A BayesianMultiHeadAttention in mean mode and the Keras layer with its weights."""
    x = np.zeros((2, 6, WIDTH), "float32")
    layer = BayesianMultiHeadAttention(num_heads=2, key_dim=3, kl_weight=0.0, seed=seed)
    layer(x, x)
    _random_posterior(layer, seed)
    tfp_bnn.set_mean_mode(layer)
    return layer, keras_attention(layer, _posterior_means(layer), x, x)


@pytest.mark.parametrize("mode", ["implicit", "implicit_and_causal", "attention_mask",
                                  "causal", "query_differs_from_value"])
def test_masks_match_keras_multi_head_attention(mode):
    layer, reference = _attention_pair()
    embedding = _embedding()
    kwargs = {}
    if mode.endswith("causal") or mode == "causal":
        kwargs["use_causal_mask"] = True
    if mode == "attention_mask":
        mask = np.random.default_rng(0).uniform(size=(2, 6, 6)) < 0.6
        mask[:, :, 0] = True
        kwargs["attention_mask"] = mask

    def inputs():
        # Fresh tensors per layer: Keras' layer removes the masks of its inputs.
        if mode in ("attention_mask", "causal"):
            x = np.random.default_rng(1).normal(size=(2, 6, WIDTH)).astype("float32")
            return x, x
        query = embedding(TOKENS)
        if mode == "query_differs_from_value":
            return query, embedding(np.where(TOKENS == 7, 0, TOKENS))
        return query, embedding(TOKENS)

    ours, our_scores = layer(*inputs(), return_attention_scores=True, **kwargs)
    expected, scores = reference(*inputs(), return_attention_scores=True, **kwargs)
    np.testing.assert_array_equal(np.asarray(our_scores) == 0, np.asarray(scores) == 0)
    np.testing.assert_allclose(our_scores, scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
    if mode.startswith("implicit") or mode == "query_differs_from_value":
        assert np.asarray(scores == 0).any()  # the masks did remove keys
        np.testing.assert_array_equal(ours._keras_mask, REAL)


def test_explicit_query_and_value_masks_equal_implicit_ones():
    layer, _ = _attention_pair()
    x = _embedding()(TOKENS)
    bare = keras.ops.convert_to_numpy(x)
    implicit = layer(x, x)
    explicit = layer(bare, bare, query_mask=REAL, value_mask=REAL)
    np.testing.assert_allclose(explicit, implicit, rtol=1e-6, atol=1e-6)
    assert not np.allclose(layer(bare, bare), implicit, atol=1e-4)


def test_transformer_block_masks_with_an_attention_mask_too():
    """A padding mask and an explicit attention mask combine (AND) inside the block."""
    block = BayesianTransformerBlock(2, 8, seed=0)
    block.build((None, None, WIDTH))
    tfp_bnn.set_mean_mode(block, True)  # after build: the sublayers exist

    def attention_mask(length):  # query 0 may not see key 1; padding is left to the mask
        mask = np.ones((length, length), bool)
        mask[0, 1] = False
        return mask

    embedding = _embedding()
    short = block(embedding(TOKENS), attention_mask=attention_mask(6))
    long = block(embedding(_padded(12)), attention_mask=attention_mask(12))
    np.testing.assert_allclose(np.asarray(long)[:, :6][REAL], np.asarray(short)[REAL],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(short._keras_mask, REAL)

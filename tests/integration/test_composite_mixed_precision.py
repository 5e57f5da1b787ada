"""Mixed precision for the composite layers, the heads and the moment path (issue 7, point 5).

Under `mixed_float16` every layer trains with `fit` (finite loss), computes
in float16, keeps float32 variables, and its KL terms and the
log-densities (losses, the classification head's log-probabilities, the
moment likelihood) are float32.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
import zoo
from tfp_bnn import moments
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import HeteroscedasticClassification
from tfp_bnn.layers import HeteroscedasticRegression
from tfp_bnn.layers import HomoscedasticNoise
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import MomentGaussianNLL
from tfp_bnn.losses import gaussian_nll
from zoo.models._common import build_optimizer

NUM = 32
TOKENS, WIDTH = 3, 4


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(NUM,) + shape).astype("float32")
    y = (x.reshape(NUM, -1).sum(-1, keepdims=True) / 4.0).astype("float32")
    return x, y



def _fit(model, x, y, loss):
    model.compile(keras.optimizers.Adam(1e-2), loss)
    build_optimizer(model)  # fit then traces its step once
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[KLScheduler(NUM)])
    assert np.all(np.isfinite(history.history["loss"])), history.history
    assert np.all(np.isfinite(history.history["kl"])) and history.history["kl"][0] > 0
    return history


def _assert_float32_state(layers):
    """float16 compute, float32 variables, float32 KL terms of the last call."""
    assert layers
    for layer in layers:
        assert layer.compute_dtype == "float16", layer.name
        assert all(v.dtype == "float32" for v in layer.weights), layer.name
        assert layer.losses, layer.name
        assert all(loss.dtype == tf.float32 for loss in layer.losses), layer.name


def _sequence_model(layer):
    inputs = keras.Input((TOKENS, WIDTH))
    if isinstance(layer, BayesianMultiHeadAttention):
        hidden = layer(inputs, inputs)
    else:
        hidden = layer(inputs)
    hidden = keras.layers.GlobalAveragePooling1D()(hidden)
    # Output in float32, as Keras advises under mixed precision.
    outputs = keras.layers.Dense(1, dtype="float32")(hidden)
    return keras.Model(inputs, outputs)


COMPOSITES = {
    "layer_norm": lambda: BayesianLayerNormalization(seed=0),
    "attention": lambda: BayesianMultiHeadAttention(2, 2, estimator="flipout", seed=0),
    "block": lambda: BayesianTransformerBlock(2, 8, dropout=0.1, bayesian_bias=True, seed=0),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_layer_trains_with_float32_kl(mixed_float16, name):
    layer = COMPOSITES[name]()
    x, y = _data((TOKENS, WIDTH))
    model = _sequence_model(layer)
    _fit(model, x, y, "mse")
    assert layer.compute_dtype == "float16"
    outputs = layer(x[:2], x[:2]) if name == "attention" else layer(x[:2])
    assert outputs.dtype == tf.float16 and np.all(np.isfinite(outputs.numpy()))
    _assert_float32_state(tfp_bnn.bayesian_layers(layer))


def test_heteroscedastic_regression_head_trains(mixed_float16):
    x, y = _data((WIDTH,))
    inputs = keras.Input((WIDTH,))
    hidden = DenseFlipout(8, activation="relu", seed=0)(inputs)
    head = HeteroscedasticRegression(1, projection="flipout", seed=1)
    model = keras.Model(inputs, head(hidden))
    _fit(model, x, y, GaussianNLL())
    predictions = model(x[:4])
    # The head computes and answers in float32 (Keras' advice for output layers).
    assert head.compute_dtype == "float16" and predictions.dtype == tf.float32
    # The Gaussian log-density of float16 predictions is computed in float32.
    assert gaussian_nll(y[:4], predictions).dtype == tf.float32
    assert GaussianNLL()(y[:4], predictions).dtype == tf.float32
    projection = head.projection_layer
    assert projection.compute_dtype == "float32"
    assert projection.losses and all(loss.dtype == tf.float32 for loss in projection.losses)


def test_homoscedastic_noise_trains(mixed_float16):
    x, y = _data((WIDTH,))
    inputs = keras.Input((WIDTH,))
    mean = DenseReparameterization(1, seed=0)(inputs)
    noise = HomoscedasticNoise()
    model = keras.Model(inputs, noise(mean))
    before = float(noise.log_variance.numpy()[0])
    _fit(model, x, y, GaussianNLL())
    assert noise.compute_dtype == "float16" and noise.log_variance.dtype == "float32"
    assert float(noise.log_variance.numpy()[0]) != before  # the gradient got through
    assert gaussian_nll(y[:4], model(x[:4])).dtype == tf.float32


def test_heteroscedastic_classification_head_trains(mixed_float16):
    x, _ = _data((WIDTH,))
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1).astype("int64")
    inputs = keras.Input((WIDTH,))
    head = HeteroscedasticClassification(3, num_samples=20, projection="flipout", seed=0)
    model = keras.Model(inputs, head(inputs))
    _fit(model, x, y, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert head.compute_dtype == "float16"
    moments_out = head.projection_layer(x[:4])
    assert moments_out.dtype == tf.float16
    # The head's Monte Carlo log-probabilities (a log-density) are float32.
    log_probs = model(x[:4])
    assert log_probs.dtype == tf.float32
    np.testing.assert_allclose(np.exp(log_probs.numpy().astype(np.float64)).sum(-1), 1.0,
                               atol=1e-5)
    _assert_float32_state([head.projection_layer])


class _MomentTransformer(keras.Model):
    """A float16 token embedding, one Bayesian block propagated in moments, a
    Bayesian head: `zoo.models.transformer` in small, the model itself in
    float32 as Keras advises for the layers that produce the loss inputs."""

    def __init__(self, mode):
        super().__init__(dtype="float32", name="moment_transformer")
        self.mode = mode
        self.embed = keras.layers.Dense(WIDTH, dtype="mixed_float16")
        self.block = BayesianTransformerBlock(2, 8, seed=0)
        self.head = DenseReparameterization(1, bayesian_bias=True, seed=1)
        self.log_noise = self.add_weight(shape=(), initializer="zeros", name="log_noise")

    def build(self, input_shape):
        self.embed.build(tuple(input_shape) + (1,))
        self.block.build((input_shape[0], TOKENS, WIDTH))
        self.head.build((input_shape[0], WIDTH))

    def call(self, inputs):
        tokens = self.embed(inputs[..., None])  # float16 activations
        self.tokens_dtype = tokens.dtype
        attention = self.block.attention
        out = moments.transformer_block(tokens, self.block.moment_parameters(), 2,
                                        attention.key_dim, mode=self.mode)
        head = moments.dense(moments.mean_over_tokens(out), *self.head.posterior_moments())
        for layer in tfp_bnn.bayesian_layers(self):
            self.add_loss(layer.kl_penalty(tf.shape(inputs)[0]))
        variance = head.variance() + tf.exp(self.log_noise)
        return tf.concat([head.mean, tf.math.log(variance)], axis=-1)


def test_moment_trained_transformer_trains_in_float32_around_float16_layers(mixed_float16):
    x, y = _data((TOKENS,))
    model = _MomentTransformer("diagonal")
    model.build((None, TOKENS))
    _fit(model, x, y, MomentGaussianNLL(mode="diagonal"))
    outputs = model(x[:4])
    assert model.tokens_dtype == tf.float16  # widened by the moment path
    assert outputs.dtype == tf.float32 and np.all(np.isfinite(outputs.numpy()))
    assert all(loss.dtype == tf.float32 for loss in model.losses)
    assert MomentGaussianNLL(mode="diagonal")(y[:4], outputs).dtype == tf.float32
    layers = tfp_bnn.bayesian_layers(model.block)
    assert len(layers) == 8
    for layer in layers:
        assert layer.compute_dtype == "float16"
        assert all(t.dtype == tf.float32 for t in layer.posterior_moments() if t is not None)


def test_zoo_bayesian_transformer_trains_under_mixed_float16(mixed_float16):
    x, y = _data((TOKENS,))
    model = zoo.build_model("bayesian_transformer", (TOKENS,), num_train=NUM, seed=0,
                            width=WIDTH, num_heads=2, ff_dim=8)
    build_optimizer(model)  # fit then traces its step once
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert all(loss.dtype == tf.float32 for loss in model.losses)
    assert model.block.compute_dtype == "float16"

"""BatchEnsembleConv2D: member m computes conv(x o r_m, W) o s_m + b_m; a BatchEnsemble CNN
trains with MemberLoss and predicts the mixture of its members."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace

M = 2
RNG = np.random.default_rng(2)


def _member(x, layer, m):
    """Member m on channels_last inputs x, from the layer's weights, in NumPy."""
    kernel, r, s, bias = (ops.convert_to_numpy(w).astype(np.float64) for w in
                          (layer.kernel, layer.input_fast_weight, layer.output_fast_weight,
                           layer.bias))
    y = checks.conv2d_reference(x * r[m], kernel, layer.strides, layer.padding)
    return y * s[m] + bias[m]


@pytest.mark.jax
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("strides, padding", [(1, "valid"), (2, "same")])
def test_tile_m_is_member_m_formula(data_format, strides, padding):
    layer = layers.BatchEnsembleConv2D(3, 3, num_members=M, strides=strides, padding=padding,
                                       data_format=data_format, bias_initializer="random_normal")
    x = RNG.normal(size=(M, 2, 7, 7, 2)).astype("float32")   # tile m: x[m], channels_last
    batch = x.reshape(-1, 7, 7, 2)
    if data_format == "channels_first":
        batch = batch.transpose(0, 3, 1, 2)
    out = ops.convert_to_numpy(layer(batch))
    if data_format == "channels_first":
        out = out.transpose(0, 2, 3, 1)
    assert layer.compute_output_shape(batch.shape)[0] == out.shape[0]
    for m in range(M):
        np.testing.assert_allclose(out[2 * m:2 * m + 2], _member(x[m], layer, m), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.jax
def test_inside_a_trace_sample_s_is_member_s_mod_m():
    layer = layers.BatchEnsembleConv2D(2, 3, num_members=M, bias_initializer="random_normal")
    x = RNG.normal(size=(3, 6, 6, 2)).astype("float32")
    layer(np.concatenate([x] * M))
    with sample_trace(2 * M):
        out = ops.convert_to_numpy(layer(np.concatenate([x] * (2 * M))))
    for s in range(2 * M):
        np.testing.assert_allclose(out[3 * s:3 * s + 3], _member(x, layer, s % M), rtol=1e-4,
                                   atol=1e-4)


def cnn(classes=3):
    """tile -> BatchEnsembleConv2D x 2 -> pooling -> BatchEnsembleDense -> untile, 8x8 inputs."""
    x = keras.Input((8, 8, 1))
    hidden = layers.EnsembleTile(M)(x)
    hidden = layers.BatchEnsembleConv2D(4, 3, num_members=M, activation="relu")(hidden)
    hidden = layers.BatchEnsembleConv2D(4, 3, num_members=M, padding="same",
                                        activation="relu")(hidden)
    hidden = keras.layers.GlobalAveragePooling2D()(hidden)
    logits = layers.BatchEnsembleDense(classes, num_members=M)(hidden)
    return keras.Model(x, layers.EnsembleUntile(M)(logits))


X, Y = checks.classification_data((8, 8, 1))


class TestCnn(checks.TrainedClassifierChecks):
    build = staticmethod(cnn)
    num_members = M
    data = (X, Y)
    seed = 4
    epochs = 10

"""PackedConv2D: a grouped convolution whose group g maps input channel block g to output
block g; a packed CNN trains with MemberLoss and predicts the mixture of its members."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers

M = 2
RNG = np.random.default_rng(6)


def _numpy(layer, x):
    """The layer on channels_last inputs, group by group, in NumPy."""
    kernel = ops.convert_to_numpy(layer.kernel).astype(np.float64)
    bias = ops.convert_to_numpy(layer.bias).astype(np.float64)
    groups, per_in = layer.groups, kernel.shape[2]
    per_out = kernel.shape[3] // groups
    blocks = [checks.conv2d_reference(x[..., g * per_in:(g + 1) * per_in],
                                      kernel[..., g * per_out:(g + 1) * per_out],
                                      layer.strides, layer.padding) for g in range(groups)]
    return np.concatenate(blocks, axis=-1) + bias


@pytest.mark.jax
@pytest.mark.parametrize("init, channels", [
    ({"first": True}, 3),
    ({}, 4),
    ({"gamma": 2, "strides": 2, "padding": "same"}, 8),
    ({"last": True, "padding": "same"}, 6),
], ids=["first", "inner", "gamma2_strided", "last"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_output_is_the_grouped_convolution(init, channels, data_format):
    layer = layers.PackedConv2D(4, 3, num_members=M, data_format=data_format,
                                bias_initializer="random_normal", **init)
    x = RNG.normal(size=(2, 7, 7, channels)).astype("float32")
    batch = x if data_format == "channels_last" else x.transpose(0, 3, 1, 2)
    out = ops.convert_to_numpy(layer(batch))
    assert out.shape == layer.compute_output_shape(batch.shape)
    if data_format == "channels_first":
        out = out.transpose(0, 2, 3, 1)
    assert out.shape[-1] == (M * 4 if init.get("last") else 8)
    np.testing.assert_allclose(out, _numpy(layer, x), rtol=1e-4, atol=1e-4)


@pytest.mark.jax
def test_kernel_has_the_layout_of_keras_grouped_conv2d():
    layer = layers.PackedConv2D(4, 3, num_members=M, gamma=2, bias_initializer="random_normal")
    x = RNG.normal(size=(2, 6, 6, 8)).astype("float32")
    out = layer(x)
    reference = keras.layers.Conv2D(8, 3, groups=4)
    reference(x)
    reference.set_weights(layer.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(out), ops.convert_to_numpy(reference(x)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_a_group_depends_on_its_own_weights_and_inputs_only():
    layer = layers.PackedConv2D(4, 3, num_members=M, bias_initializer="random_normal")
    x = RNG.normal(size=(2, 6, 6, 8)).astype("float32")
    out = ops.convert_to_numpy(layer(x))
    kernel, bias = (ops.convert_to_numpy(w) for w in (layer.kernel, layer.bias))
    for g in range(M):
        own = slice(4 * g, 4 * (g + 1))
        others = np.ones(8, bool)
        others[own] = False
        changed_kernel, changed_bias, changed_x = kernel.copy(), bias.copy(), x.copy()
        changed_kernel[..., own] += 1.0
        changed_bias[own] += 1.0
        changed_x[..., own] += 1.0
        layer.set_weights([changed_kernel, changed_bias])
        after = ops.convert_to_numpy(layer(changed_x))
        layer.set_weights([kernel, bias])
        np.testing.assert_array_equal(after[..., others], out[..., others])
        assert np.abs(after[..., own] - out[..., own]).max() > 1e-2


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_groups_run_as_plain_tensorflow_convolutions(data_format):
    # A grouped convolution has no TensorFlow CPU kernel without oneDNN once Grappler fuses
    # it with a bias add, and Keras runs every grouped `ops.conv` through a nested
    # XLA-compiled function instead, 30 times slower to train (see PackedConv2D): the
    # packed layer's graph holds one ungrouped Conv2D per group and no nested function.
    import tensorflow as tf  # noqa: PLC0415 - inspects a TensorFlow graph

    layer = layers.PackedConv2D(4, 3, num_members=M, gamma=2, data_format=data_format)
    shape = (None, 6, 6, 8) if data_format == "channels_last" else (None, 8, 6, 6)
    graph = tf.function(layer).get_concrete_function(tf.TensorSpec(shape)).graph
    operations = graph.get_operations()
    convolutions = [op for op in operations if op.type == "Conv2D"]
    assert len(convolutions) == layer.groups == 4
    for op in convolutions:   # ungrouped: the filter takes all the channels it is given
        axis = -1 if op.get_attr("data_format") == b"NHWC" else 1
        assert op.inputs[0].shape[axis] == op.inputs[1].shape[-2] == 2
    assert not [op.type for op in operations if "PartitionedCall" in op.type]


def cnn(classes=3):
    """Packed first conv -> packed conv -> pooling -> packed last Dense -> PackedOutput."""
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        layers.PackedConv2D(4, 3, num_members=M, first=True, activation="relu"),
        layers.PackedConv2D(4, 3, num_members=M, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        layers.PackedDense(classes, num_members=M, last=True),
        layers.PackedOutput(M)])


X, Y = checks.classification_data((8, 8, 1))


class TestCnn(checks.TrainedClassifierChecks):
    build = staticmethod(cnn)
    num_members = M
    data = (X, Y)
    seed = 6
    epochs = 10

"""channels_first convolutions without a GPU: channels_last between transposes, same numbers.

TensorFlow's Eigen CPU kernels have no NCHW convolution, and its oneDNN
kernels (which have one) are on only on some CPUs. These tests read the
data formats of the convolutions in the traced graph, so they check the path
taken on any CPU, with oneDNN on or off: `TF_ENABLE_ONEDNN_OPTS=0 pytest` runs
the other path's kernels as well.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import layers
from tfp_bnn.layers.variational import _conv_layout

CHANNELS_LAST = {"NWC", "NHWC", "NDHWC"}
NO_GPU = not tf.config.get_visible_devices("GPU")

# (rank, kernel_size, strides, padding, dilation_rate, groups)
SETTINGS = [
    (1, 3, 2, "valid", 1, 1),
    (1, 3, 1, "same", 2, 2),
    (2, (3, 2), (2, 1), "same", 1, 2),
    (2, 3, 1, "valid", 2, 1),
    (3, 2, 2, "same", 1, 1),
    (3, 3, 1, "valid", 1, 2),
]


def _tuple(value, rank):
    return (value,) * rank if isinstance(value, int) else value


def _case(rank, kernel_size, groups, seed=0):
    rng = np.random.default_rng(seed)
    spatial = (7, 6, 5)[:rank]
    x_last = rng.normal(size=(2,) + spatial + (4,)).astype("float32")
    kernel = rng.normal(size=_tuple(kernel_size, rank) + (4 // groups, 6)).astype("float32")
    # Tensors, not arrays: Keras compiles grouped convolutions with XLA, which
    # folds NumPy inputs (constants) at compile time, in other round-off.
    x_first = tf.constant(np.moveaxis(x_last, -1, 1))
    return tf.constant(x_last), x_first, tf.constant(kernel)


def _conv_formats(fn, x):
    """Data formats of the convolutions in the graph `fn(x)` traces (XLA-compiled parts too)."""
    graph = tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
    graph_def = graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return {node.attr["data_format"].s.decode() for node in nodes if node.op.startswith("Conv")}


@pytest.mark.parametrize("rank, kernel_size, strides, padding, dilation_rate, groups", SETTINGS)
def test_channels_first_is_keras_channels_last_of_the_transposed_inputs(
        monkeypatch, rank, kernel_size, strides, padding, dilation_rate, groups):
    monkeypatch.setattr(_conv_layout, "native_channels_first", lambda: False)
    x_last, x_first, kernel = _case(rank, kernel_size, groups)
    args = (_tuple(strides, rank), padding)
    ours = _conv_layout.conv(x_first, kernel, *args, "channels_first",
                             _tuple(dilation_rate, rank))
    want = keras.ops.conv(x_last, kernel, strides=args[0], padding=padding,
                          data_format="channels_last", dilation_rate=dilation_rate)
    # The same convolution of the same numbers: transposes only move them.
    np.testing.assert_array_equal(np.moveaxis(keras.ops.convert_to_numpy(ours), 1, -1),
                                  keras.ops.convert_to_numpy(want))
    assert _conv_formats(
        lambda x: _conv_layout.conv(x, kernel, *args, "channels_first",
                                    _tuple(dilation_rate, rank)), x_first) <= CHANNELS_LAST


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_a_gpu_convolves_channels_first_natively(monkeypatch, rank):
    # Traced only: a CPU without oneDNN has no kernel to run it.
    monkeypatch.setattr(_conv_layout, "native_channels_first", lambda: True)
    x_last, x_first, kernel = _case(rank, 2, 1)
    formats = _conv_formats(
        lambda x: _conv_layout.conv(x, kernel, (1,) * rank, "same", "channels_first",
                                    (1,) * rank), x_first)
    assert formats and not formats & CHANNELS_LAST
    assert _conv_formats(
        lambda x: _conv_layout.conv(x, kernel, (1,) * rank, "same", "channels_last",
                                    (1,) * rank), x_last) <= CHANNELS_LAST


@pytest.mark.jax
def test_the_native_path_needs_a_visible_gpu_or_jax():
    # XLA, which runs every JAX convolution, takes channels_first on any device.
    native = keras.backend.backend() == "jax" or not NO_GPU
    assert _conv_layout.native_channels_first() is native


@pytest.mark.skipif(not NO_GPU, reason="with a GPU, channels_first runs natively")
@pytest.mark.parametrize("cls, kwargs", [
    (layers.Conv1DFlipout, {"padding": "causal"}),
    (layers.Conv2DReparameterization, {"strides": 2}),
    (layers.Conv3DFlipout, {"filters": 4, "groups": 2}),
    (layers.NodeConv2D, {"noise": "both"}),
], ids=["Conv1DFlipout", "Conv2DReparameterization", "Conv3DFlipout", "NodeConv2D"])
def test_layers_on_a_cpu_have_no_channels_first_convolution(cls, kwargs):
    # Without this path, TF_ENABLE_ONEDNN_OPTS=0 fails "only supports the NHWC
    # tensor format on the CPU"; with oneDNN on, these graphs would hold NCHW.
    layer = cls(**{"filters": 3, "kernel_size": 2, "data_format": "channels_first",
                   "kl_weight": 0.1, **kwargs})
    x = np.ones((2, 4) + (5,) * layer.rank, "float32")
    formats = _conv_formats(lambda t: layer(t, training=True), x)
    assert formats and formats <= CHANNELS_LAST
    assert layer(x).shape == layer.compute_output_shape(x.shape)

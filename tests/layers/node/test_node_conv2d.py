"""NodeConv2D: channel noise per example, shared over positions; components, fit, saving."""

import os

import keras
import numpy as np
import pytest

import tfp_bnn
from tests.layers.variational import conv_nd_checks as checks
from tfp_bnn.layers import _tracing
from tfp_bnn.layers.node.node_conv2d import NodeConv2D

_NO_NOISE_RHO = -40.0  # softplus(-40) ~ 4e-18
NOISES = ["input", "output", "both"]


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _set_nodes(layer, site, loc, rho):
    for name, value in (("loc", loc), ("rho", rho)):
        variable = getattr(layer, f"{site}_{name}")
        variable.assign(np.broadcast_to(np.asarray(value, "float32"), variable.shape))


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_shapes_for_every_noise_site_and_data_format(noise, data_format):
    layer = NodeConv2D(4, (3, 2), strides=(2, 1), padding="valid", data_format=data_format,
                       noise=noise, num_components=2, kl_weight=1.0)
    shape = (3, 9, 8, 5) if data_format == "channels_last" else (3, 5, 9, 8)
    expected = (3, 4, 7, 4) if data_format == "channels_last" else (3, 4, 4, 7)
    symbolic = layer(keras.Input(shape[1:]))
    assert tuple(symbolic.shape) == (None,) + expected[1:]
    y = _np(layer(_inputs(shape)))
    assert y.shape == expected == layer.compute_output_shape(shape)
    assert np.all(np.isfinite(y)) and len(layer.losses) == 1
    for site in layer.sites:
        assert getattr(layer, f"{site}_loc").shape == (2, 5 if site == "input" else 4)


@pytest.mark.parametrize("noise, data_format", [
    (noise, data_format) if (noise, data_format) != ("both", "channels_last")
    else pytest.param(noise, data_format, marks=pytest.mark.jax)
    for data_format in ["channels_last", "channels_first"] for noise in NOISES])
def test_unit_means_and_vanishing_scales_give_the_deterministic_conv2d(noise, data_format):
    kwargs = dict(filters=6, kernel_size=3, padding="same", dilation_rate=2, activation="relu",
                  data_format=data_format)
    layer = NodeConv2D(noise=noise, num_components=3, kl_weight=1.0, seed=0, **kwargs)
    shape = (2, 7, 7, 4) if data_format == "channels_last" else (2, 4, 7, 7)
    layer.build(shape)
    layer.bias.assign(np.linspace(-0.5, 0.5, 6).astype("float32"))
    for site in layer.sites:
        _set_nodes(layer, site, 1.0, _NO_NOISE_RHO)
    conv = checks.KerasConv(2, **kwargs)
    conv.build(shape)
    conv.set_weights([layer.kernel.numpy(), layer.bias.numpy()])
    x = _inputs(shape)
    for training in (True, False):
        np.testing.assert_allclose(_np(layer(x, training=training)), conv(x),
                                   rtol=1e-5, atol=1e-5)


def _output_ratio(layer, x, training=None):
    """Output over the deterministic output, for a layer with output noise only."""
    y = _np(layer(x, training=training)).astype(np.float64)
    deterministic = _np(keras.ops.conv(x, layer.kernel, padding=layer.padding)) + layer.bias.numpy()
    return y / deterministic


def test_output_noise_is_one_z_per_example_and_channel_shared_over_positions():
    layer = NodeConv2D(3, 2, noise="output", kl_weight=1.0, seed=1, scale_init=0.2)
    x = np.repeat(_inputs((1, 6, 6, 2), seed=2), 4, axis=0)  # 4 identical examples
    layer.build(x.shape)
    layer.bias.assign(np.full(3, 5.0, "float32"))  # keeps the deterministic output away from 0
    ratio = _output_ratio(layer, x)
    # One z per example and channel, to float32 round-off, at every position.
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:, :1, :1, :], ratio.shape),
                               rtol=1e-4)
    z = ratio[:, 0, 0, :]
    assert len({tuple(np.round(row, 4)) for row in z}) == 4  # a fresh z per example


def test_input_noise_scales_whole_input_channels():
    layer = NodeConv2D(1, 1, noise="input", use_bias=False, kl_weight=1.0, num_components=2)
    x = np.ones((4, 3, 3, 2), "float32")
    layer.build(x.shape)
    layer.kernel.assign(np.array([[[[1.0], [0.0]]]], "float32"))  # output = z_0 * x_0
    _set_nodes(layer, "input", [[1.0, 1.0], [2.0, 1.0]], np.log(np.expm1(1e-6)))
    y = _np(layer(x, training=True))[..., 0]
    expected = np.array([1.0, 2.0, 1.0, 2.0])[:, None, None] * np.ones((1, 3, 3))
    np.testing.assert_allclose(y, expected, rtol=1e-4)


def test_sample_trace_assigns_components_by_sample_index():
    layer = NodeConv2D(2, 1, noise="output", num_components=2, kl_weight=1.0)
    x = _inputs((2, 3, 3, 2), seed=3)
    layer.build(x.shape)
    layer.bias.assign(np.full(2, 4.0, "float32"))
    _set_nodes(layer, "output", [[1.0], [3.0]], np.log(np.expm1(1e-6)))
    tiled = np.tile(x, (3, 1, 1, 1))  # S = 3 samples of B = 2 examples
    with _tracing.sample_trace(3):
        ratio = _output_ratio(layer, tiled, training=False)
    expected = np.repeat([1.0, 3.0, 1.0], 2)[:, None, None, None] * np.ones(ratio.shape[1:])
    np.testing.assert_allclose(ratio, expected, rtol=1e-4)


def _classifier(posterior="gaussian"):
    return keras.Sequential([
        keras.Input((8, 8, 1)),
        NodeConv2D(4, 3, activation="relu", noise="both", num_components=2, posterior=posterior,
                   flow_length=1, kl_weight=1e-3, seed=1),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2),
    ])


def _images(n=32, seed=4):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    x = rng.normal(0.0, 0.3, (n, 8, 8, 1)).astype("float32")
    x[labels == 1, 2:6, 2:6] += 1.0  # a bright square marks class 1
    return x, labels


def test_fit_under_xla_reduces_the_loss_and_predict_runs():
    x, labels = _images()
    model = _classifier()
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    assert model.jit_compile is True
    history = model.fit(x, labels, epochs=12, batch_size=32, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < 0.7 * history[0]
    pred = tfp_bnn.predict.classification(model, x[:5], num_samples=4)
    assert pred.probs.shape == (5, 2)
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_keras_file_round_trip_in_safe_mode(posterior, tmp_path):
    x, _ = _images(8)
    model = _classifier(posterior)
    rng = np.random.default_rng(5)
    for variable in model.trainable_weights:  # off their initial values
        variable.assign(variable.numpy() + rng.normal(0.0, 0.05, variable.shape).astype("float32"))
    tfp_bnn.set_mean_mode(model)
    expected = _np(model(x))
    path = os.path.join(tmp_path, "conv.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert len(loaded.weights) == len(model.weights)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(_np(loaded(x)), expected)
    assert loaded.layers[0].get_config() == model.layers[0].get_config()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(filters=0), r"`filters` must be a positive int, got 0"),
        (dict(kernel_size=(3, 0)), r"`kernel_size`.*\(3, 0\)"),
        (dict(strides=-1), r"`strides`"),
        (dict(padding="causal"), r"`padding`.*'causal'"),
        (dict(groups=3), r"`filters` \(4\) must be divisible by `groups` \(3\)"),
        (dict(data_format="nhwc"), r"`data_format`.*'nhwc'"),
        (dict(strides=2, dilation_rate=2), r"`strides` > 1 is not compatible"),
        (dict(noise="hidden"), r"`noise`.*'hidden'"),
        (dict(num_components=0), r"`num_components`.*got 0"),
        (dict(flow_length=-2), r"`flow_length`.*-2"),
        (dict(prior_stddev=0), r"`prior_stddev`.*0"),
        (dict(entropy_weight=-1), r"`entropy_weight`.*-1"),
        (dict(posterior="mixture"), r"`posterior`.*'mixture'"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, message):
    kwargs = dict({"filters": 4, "kernel_size": 3}, **kwargs)
    with pytest.raises(ValueError, match=message):
        NodeConv2D(**kwargs)


def test_unknown_channels_and_indivisible_groups_are_reported_at_build():
    with pytest.raises(ValueError, match="known channel dimension"):
        NodeConv2D(4, 3).build((None, 5, 5, None))
    with pytest.raises(ValueError, match=r"input channels \(3\).*`groups` \(2\)"):
        NodeConv2D(4, 3, groups=2).build((None, 5, 5, 3))

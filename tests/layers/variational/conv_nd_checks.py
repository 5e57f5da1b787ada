"""Checks shared by the tests of the 1-D, 2-D and 3-D variational convolutions.

Each function takes the layer class and the number of spatial dimensions
`rank`, so tests/layers/variational/test_conv{1,2,3}d_{flipout,reparameterization}.py run
the same checks against `keras.layers.Conv1D`, `Conv2D` and `Conv3D`.
"""

import keras
import numpy as np
import pytest
from keras.src import testing

import tfp_bnn
from tfp_bnn.predict import sample

KERAS_CONV = {1: keras.layers.Conv1D, 2: keras.layers.Conv2D, 3: keras.layers.Conv3D}
SPATIAL = {1: (9,), 2: (5, 4), 3: (5, 6, 4)}
CHANNELS = 4


def _np(x):
    return keras.ops.convert_to_numpy(x)


def inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def input_shape(rank, data_format="channels_last", batch=3, channels=CHANNELS, spatial=None):
    spatial = SPATIAL[rank] if spatial is None else spatial
    if data_format == "channels_last":
        return (batch,) + tuple(spatial) + (channels,)
    return (batch, channels) + tuple(spatial)


class KerasConv:
    """`keras.layers.Conv{rank}D(**kwargs)` that runs on any CPU.

    Shapes come from Keras' layer in the given data format. Values in
    channels_first come from Keras' channels_last layer with the same weights,
    applied to the transposed inputs and transposed back: TensorFlow's CPU
    kernels without oneDNN have no channels_first convolution, so Keras' own
    channels_first layer fails there. A transpose only moves numbers, so the
    values are exactly those Keras' channels_first layer gives where it runs.
    """

    def __init__(self, rank, **kwargs):
        self.layer = KERAS_CONV[rank](**kwargs)
        self.channels_first = kwargs.get("data_format") == "channels_first"
        self.twin = KERAS_CONV[rank](**dict(kwargs, data_format="channels_last"))

    def build(self, shape):
        self.layer.build(shape)
        if self.channels_first:
            self.twin.build((shape[0],) + tuple(shape[2:]) + (shape[1],))

    def set_weights(self, weights):
        # Keras' kernel is [*kernel_size, in / groups, filters] in both formats.
        self.layer.set_weights(weights)
        if self.channels_first:
            self.twin.set_weights(weights)

    def compute_output_shape(self, shape):
        return self.layer.compute_output_shape(shape)

    def __call__(self, x):
        if not self.channels_first:
            return _np(self.layer(x))
        return np.moveaxis(_np(self.twin(np.moveaxis(x, 1, -1))), -1, 1)


def _set_bias(layer, seed):
    """Gives the (mean of the) bias of a built `layer` a non-zero value."""
    bias = layer.bias if layer.bias_params is None else layer.bias_params[0]
    bias.assign(np.random.default_rng(seed).normal(size=bias.shape).astype("float32"))


def check_mean_mode_equals_keras(cls, rank, conv_kwargs):
    """Shapes as Keras gives them; in mean mode, exactly keras.layers.ConvND(loc, bias)."""
    data_format = conv_kwargs.get("data_format", "channels_last")
    shape = input_shape(rank, data_format)
    layer = cls(filters=6, kl_weight=0.1, seed=1, activation="tanh", **conv_kwargs)
    layer.build(shape)
    _set_bias(layer, seed=2)
    reference = KerasConv(rank, filters=6, activation="tanh", **conv_kwargs)
    reference.build(shape)
    reference.set_weights([_np(layer.kernel_params[0]), _np(layer.bias)])

    expected = reference.compute_output_shape(shape)
    assert layer.compute_output_shape(shape) == expected
    unknown = (None,) + shape[1:]
    assert layer.compute_output_shape(unknown) == reference.compute_output_shape(unknown)
    symbolic = layer(keras.Input(shape[1:]))
    assert tuple(symbolic.shape) == (None,) + tuple(expected[1:])

    x = inputs(shape)
    sampled = _np(layer(x))
    assert sampled.shape == tuple(expected)
    tfp_bnn.set_mean_mode(layer, True)
    mean = _np(layer(x))
    want = reference(x)
    # Sampling moved the output: the comparison below is not vacuous.
    assert np.max(np.abs(sampled - want)) > 1e-3
    np.testing.assert_array_equal(mean, want)


def check_kl_once_per_call(cls, rank):
    """Every call leaves one loss, kl_weight * KL, however often it is called."""
    shape = input_shape(rank, batch=2)
    layer = cls(filters=3, kernel_size=2, kl_weight=0.25, seed=0)
    x = inputs(shape)
    for _ in range(3):
        layer(x, training=True)
        assert len(layer.losses) == 1
    kl = float(layer.kl_divergence())
    assert kl > 0
    np.testing.assert_allclose(float(layer.losses[0]), 0.25 * kl, rtol=1e-6)
    model = keras.Sequential([keras.Input(shape[1:]), layer])
    model(x)
    model(x)
    assert len(model.losses) == 1


def check_keras_harness(cls, rank, **conv_kwargs):
    """Keras 3's own `run_layer_test` (no expected output: the layer is stochastic).

    It runs channels_first too (float16 included), which keras.layers.ConvND
    does not on a CPU without oneDNN: the layers convolve in channels_last
    there (tfp_bnn/layers/variational/_conv_layout.py).
    """
    data_format = conv_kwargs.get("data_format", "channels_last")
    shape = input_shape(rank, data_format, batch=2, channels=2, spatial=(4,) * rank)
    reference = KERAS_CONV[rank](filters=3, kernel_size=3, **conv_kwargs)
    testing.TestCase().run_layer_test(
        cls,
        dict(filters=3, kernel_size=3, kl_weight=0.1, seed=0, **conv_kwargs),
        input_shape=shape,
        expected_output_shape=reference.compute_output_shape(shape),
        expected_num_trainable_weights=3,  # kernel loc and rho, bias
        expected_num_non_trainable_weights=2,  # kl_weight, sampling switch
        expected_num_seed_generators=1,
        expected_num_losses=1,
        supports_masking=False,
    )


def check_predict_sample(cls, rank, data_format, num_samples=6):
    """`tfp_bnn.predict.sample`: [T, N, ...] outputs; one weight draw per sample.

    Inputs (a, b, a + b, 0) share each sample's kernel and bias, so with a
    linear activation y(a + b) = y(a) + y(b) - y(0) sample by sample; a
    kernel or bias mixed up between samples or examples breaks this.
    """
    shape = input_shape(rank, data_format, batch=2)
    a, b = inputs(shape, seed=5)
    x = np.stack([a, b, a + b, np.zeros_like(a)])
    layer = cls(filters=3, kernel_size=2, padding="same", data_format=data_format,
                bayesian_bias=True, kl_weight=0.1, seed=4)
    model = keras.Sequential([keras.Input(shape[1:]), layer])
    _set_bias(layer, seed=6)
    out_shape = (num_samples, 4) + tuple(layer.compute_output_shape(shape)[1:])

    draws = sample(model, x, num_samples=num_samples)
    assert draws.shape == out_shape
    assert np.all(np.isfinite(draws))
    scale = np.max(np.abs(draws))
    np.testing.assert_allclose(draws[:, 2], draws[:, 0] + draws[:, 1] - draws[:, 3],
                               rtol=0, atol=1e-5 * scale)
    # Distinct samples, and a zero input shows a bias that varies by sample.
    assert np.min(np.std(draws[:, 0], axis=0)) > 0
    assert np.min(np.std(draws[:, 3], axis=0)) > 0

    tfp_bnn.set_mean_mode(model, True)
    draws = sample(model, x, num_samples=num_samples)
    assert draws.shape == out_shape
    mean = _np(model(x))
    for s in range(num_samples):
        np.testing.assert_allclose(draws[s], mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(draws[s], draws[0])


def check_flipout_signs(cls, rank, data_format):
    """One Flipout sign per example and channel, shared over the positions.

    With a 1x..x1 kernel, example n's perturbation y_n - conv(x_n, loc) is
    then x_n @ W_n at every position, W_n = diag(s_n) delta diag(r_n): one
    matrix per example (found by least squares, with zero residual), equal
    in absolute value across examples (one delta per call), and with signs
    that differ between examples. Signs drawn per position would leave a
    residual.
    """
    shape = input_shape(rank, data_format, batch=4, channels=3)
    layer = cls(filters=4, kernel_size=1, data_format=data_format, use_bias=False,
                kl_weight=0.1, seed=7)
    layer.build(shape)
    x = inputs(shape, seed=8)
    noisy = _np(layer(x, training=True))
    tfp_bnn.set_mean_mode(layer, True)
    perturbation = noisy - _np(layer(x))
    if data_format == "channels_first":
        x = np.moveaxis(x, 1, -1)
        perturbation = np.moveaxis(perturbation, 1, -1)
    matrices = []
    for n in range(shape[0]):
        xn = x[n].reshape(-1, 3).astype(np.float64)
        pn = perturbation[n].reshape(-1, 4).astype(np.float64)
        w, *_ = np.linalg.lstsq(xn, pn, rcond=None)
        assert np.max(np.abs(xn @ w - pn)) < 1e-4 * np.max(np.abs(pn))
        matrices.append(w)
    for w in matrices[1:]:
        np.testing.assert_allclose(np.abs(w), np.abs(matrices[0]), rtol=1e-3)
    assert any(not np.allclose(w, matrices[0]) for w in matrices[1:])


def check_bad_arguments(cls, rank):
    """Arguments of the wrong length or kind name themselves in a ValueError."""
    with pytest.raises(ValueError, match=rf"`kernel_size`.*tuple of {rank} positive ints"):
        cls(2, (3,) * (rank + 1))
    with pytest.raises(ValueError, match=r"`strides`"):
        cls(2, 3, strides=(1,) * (rank + 1))
    with pytest.raises(ValueError, match=r"`dilation_rate`.*0"):
        cls(2, 3, dilation_rate=0)
    with pytest.raises(ValueError, match=r"`data_format`.*'NCW'"):
        cls(2, 3, data_format="NCW")
    if rank == 1:
        assert cls(2, 3, padding="CAUSAL").padding == "causal"
    else:  # as in Keras, only Conv1D pads causally
        with pytest.raises(ValueError, match=r"`padding`.*'causal'"):
            cls(2, 3, padding="causal")
    with pytest.raises(ValueError, match=rf"expected ndim={rank + 2}, found ndim={rank + 1}"):
        cls(2, 1, kl_weight=0.1)(np.ones((2,) * (rank + 1), "float32"))

"""The N-d convolution base: 2-D layers unchanged by it, aliases, the shared checks in 2-D."""

import json

import keras
import numpy as np
import pytest

import tfp_bnn
from tests.layers import conv_nd_checks as checks
from tfp_bnn import layers

# Conv2DFlipout's config as the 2-D-only base wrote it (before Conv1D/Conv3D).
LEGACY_CONFIG = json.loads("""{"name": "conv2d_flipout", "trainable": true,
 "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
           "registered_name": null},
 "activation": "relu", "use_bias": true,
 "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                        "config": {"seed": null, "input_axes": null, "output_axes": null},
                        "registered_name": null},
 "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {},
                      "registered_name": null},
 "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null,
 "bias_constraint": null,
 "posterior": {"module": "tfp_bnn.posteriors", "class_name": "MeanFieldNormal",
               "config": {"rho_init": -3.0, "rho_init_stddev": 0.1},
               "registered_name": "tfp_bnn>MeanFieldNormal"},
 "prior": {"module": "tfp_bnn.priors", "class_name": "NormalPrior",
           "config": {"loc": 0.0, "scale": 1.0}, "registered_name": "tfp_bnn>NormalPrior"},
 "kl_weight": 0.5, "kl_estimator": "auto", "bayesian_bias": true, "seed": 3, "filters": 3,
 "kernel_size": [3, 2], "strides": [2, 1], "padding": "same",
 "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1}""")


def test_legacy_conv2d_config_loads_and_is_written_the_same():
    layer = layers.Conv2DFlipout.from_config(LEGACY_CONFIG)
    assert layer.kernel_size == (3, 2) and layer.strides == (2, 1)
    layer.build((None, 6, 5, 2))
    assert [tuple(v.shape) for v in layer.kernel_params] == [(3, 2, 2, 3)] * 2
    assert tuple(layer.bias_params[0].shape) == (3,)
    fresh = layers.Conv2DFlipout(3, (3, 2), strides=(2, 1), padding="same",
                                 data_format="channels_last", activation="relu",
                                 kl_weight=0.5, seed=3, bayesian_bias=True,
                                 name="conv2d_flipout")
    written = json.loads(json.dumps(fresh.get_config()))
    # The posterior and prior objects write their own configs (and may grow).
    for key in ("posterior", "prior"):
        assert written.pop(key)["class_name"] == LEGACY_CONFIG[key]["class_name"]
    assert written == {k: v for k, v in LEGACY_CONFIG.items() if k not in ("posterior", "prior")}


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("kind", ["Flipout", "Reparameterization"])
def test_tfp_names_are_aliases(rank, kind):
    ours = getattr(layers, f"Conv{rank}D{kind}")
    assert getattr(layers, f"Convolution{rank}D{kind}") is ours
    assert ours.rank == rank
    assert keras.saving.get_registered_name(ours) == f"tfp_bnn>Conv{rank}D{kind}"
    assert f"Convolution{rank}D{kind}" in layers.__all__


@pytest.mark.parametrize("conv_kwargs", [
    {"kernel_size": 3, "data_format": "channels_first", "padding": "same"},
    {"kernel_size": (3, 2), "strides": (2, 1), "groups": 2},
], ids=["channels_first_same", "strided_grouped"])
def test_conv2d_mean_mode_still_equals_keras_conv2d(conv_kwargs):
    checks.check_mean_mode_equals_keras(layers.Conv2DReparameterization, 2, conv_kwargs)


def test_conv2d_sampled_path_channels_first():
    checks.check_predict_sample(layers.Conv2DFlipout, 2, "channels_first")


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_conv2d_flipout_signs(data_format):
    checks.check_flipout_signs(layers.Conv2DFlipout, 2, data_format)


def test_causal_padding_is_conv1d_only_and_pads_the_past():
    x = np.random.default_rng(0).normal(size=(1, 6, 2)).astype("float32")
    layer = layers.Conv1DReparameterization(1, 3, padding="causal", dilation_rate=2,
                                            kl_weight=0.1, seed=0)
    tfp_bnn.set_mean_mode(layer, True)
    before = keras.ops.convert_to_numpy(layer(x))
    # Output t depends on inputs up to t only: change the last step alone.
    changed = x.copy()
    changed[0, -1] += 5.0
    after = keras.ops.convert_to_numpy(layer(changed))
    assert before.shape == (1, 6, 1)
    np.testing.assert_array_equal(before[0, :-1], after[0, :-1])
    assert not np.allclose(before[0, -1], after[0, -1])
    with pytest.raises(ValueError, match=r"`padding`.*'causal'"):
        layers.Conv2DFlipout(2, 3, padding="causal")

"""Conv2DFlipout: keras.layers.Conv2D's arguments, Flipout's per-example signs."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tests.layers.variational import batteries
from tests.layers.variational import conv_nd_checks as checks
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


# On JAX one setting proves the port (config, calls, KL gradient, seeds, a fit
# step, .keras round trip): the strided Bayesian bias, which draws a bias too.
BATTERY = [pytest.param(*p.values, id=p.id,
                        marks=[pytest.mark.jax] if p.id == "strided_bayesian_bias" else [])
           for p in batteries.CONV2D_SETTINGS]


@pytest.mark.parametrize("extra", BATTERY)
def test_standard_battery(extra):
    batteries.check_conv2d(layers.Conv2DFlipout, extra)


def test_sampled_path_channels_first():
    checks.check_predict_sample(layers.Conv2DFlipout, 2, "channels_first")


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_one_flipout_sign_per_example_and_channel(data_format):
    checks.check_flipout_signs(layers.Conv2DFlipout, 2, data_format)


def test_groups_must_divide_input_channels():
    with pytest.raises(ValueError, match=r"input channels \(3\).*`groups` \(2\)"):
        layers.Conv2DFlipout(4, 3, groups=2, kl_weight=0.1)(np.ones((1, 5, 5, 3), "float32"))


def test_sizes_as_int_tensors_as_tfp_takes_them():
    layer = layers.Conv2DFlipout(tf.constant(2), tf.constant(3), strides=np.int64(1))
    assert (layer.filters, layer.kernel_size, layer.strides) == (2, (3, 3), (1, 1))
    assert type(layer.filters) is int and all(type(k) is int for k in layer.kernel_size)
    with pytest.raises(ValueError, match=r"^`kernel_size` must be a positive int or a tuple "
                                         r"of 2 positive ints, got <tf.Tensor"):
        layers.Conv2DFlipout(2, tf.constant(3.0))

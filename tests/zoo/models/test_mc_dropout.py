"""Tests of zoo.models.mc_dropout: dropout before every Dense, Gal's weight decay."""

import keras
import numpy as np
import pytest

import tfp_bnn
import zoo
from tfp_bnn.layers import MCDropout


@pytest.mark.parametrize("name", ["mc_dropout_mlp", "mc_dropout_mlp_heteroscedastic"])
@pytest.mark.parametrize("shape", [(8,), (8, 8, 1)])
def test_drops_before_every_dense_with_gal_weight_decay(name, shape):
    num_train, rate, length_scale = 927, 0.1, 0.02
    model = zoo.build_model(name, shape, num_train=num_train, rate=rate,
                            length_scale=length_scale)
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    dropout = [layer for layer in model.layers if isinstance(layer, MCDropout)]
    assert len(dense) == len(dropout) == 2
    expected_decay = length_scale**2 * (1 - rate) / (2 * num_train)
    for drop, layer in zip(dropout, dense):
        assert layer.input is drop.output, f"{layer.name} is not fed by dropout"
        assert drop.rate == rate
        assert layer.kernel_regularizer.get_config()["l2"] == pytest.approx(expected_decay)
        assert layer.bias_regularizer is None
    # The inputs are dropped too (after flattening an image).
    source = model.input if len(shape) == 1 else model.get_layer("flatten").output
    assert dropout[0].input is source
    # One L2 term per Dense, no KL.
    model(np.zeros((1, *shape), "float32"))
    assert len(model.losses) == 2


def test_defaults_are_gals():
    model = zoo.build_model("mc_dropout_mlp", (8,), num_train=1000)
    assert {layer.rate for layer in tfp_bnn.bayesian_layers(model)} == {0.05}
    decay = 0.01**2 * (1 - 0.05) / (2 * 1000)
    for layer in model.layers:
        if isinstance(layer, keras.layers.Dense):
            assert layer.kernel_regularizer.get_config()["l2"] == pytest.approx(decay)

"""Tests of zoo.models.flipout: `flipout_mlp` and `flipout_lenet`."""

import keras
import pytest

import tfp_bnn
import zoo
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import HomoscedasticNoise

NUM_CLASSES = 3


@pytest.mark.parametrize("name", ["flipout_mlp", "flipout_mlp_heteroscedastic"])
def test_mlp_uses_dense_flipout_with_a_standard_normal_prior(name):
    model = zoo.build_model(name, (8,), num_train=16)
    layers = tfp_bnn.bayesian_layers(model)
    assert len(layers) == 2
    for layer in layers:
        assert type(layer) is DenseFlipout
        assert isinstance(layer.prior, priors.NormalPrior)
        assert (layer.prior.loc, layer.prior.scale) == (0.0, 1.0)
        assert layer.kl_estimator != "mc"
        assert isinstance(layer.posterior, posteriors.MeanFieldNormal)


def _lenet(task, shape=(8, 8, 1)):
    return zoo.build_model("flipout_lenet", shape, task=task,
                           num_classes=NUM_CLASSES if task == "classification" else None,
                           num_train=10)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_lenet_is_lenet5_with_flipout_everywhere(task):
    model = _lenet(task)
    convs = [layer for layer in model.layers if isinstance(layer, Conv2DFlipout)]
    assert [layer.filters for layer in convs] == [6, 16]
    assert all(tuple(layer.kernel_size) == (5, 5) for layer in convs)
    assert len([l for l in model.layers if isinstance(l, keras.layers.MaxPooling2D)]) == 2
    head = [NUM_CLASSES] if task == "classification" else [1]
    assert [l.units for l in model.layers if isinstance(l, DenseFlipout)] == [120, 84] + head
    stochastic = tfp_bnn.bayesian_layers(model)
    assert all(isinstance(layer, (Conv2DFlipout, DenseFlipout)) for layer in stochastic)
    assert len({layer.seed for layer in stochastic}) == len(stochastic) == 5
    assert isinstance(model.layers[-1], HomoscedasticNoise) == (task == "regression")
    # MNIST-sized images fit as well as the 8x8 digits.
    assert _lenet(task, (28, 28, 1)).output_shape == model.output_shape


@pytest.mark.parametrize("input_shape", [(8,), (24, 1), (8, 8), (3, 3, 1), (8, 3, 1)])
def test_lenet_needs_images_of_at_least_4x4(input_shape):
    with pytest.raises(ValueError, match="input_shape") as info:
        _lenet("classification", input_shape)
    assert "image" in str(info.value)

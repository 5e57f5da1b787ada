"""Tests of zoo.models.node_bnn: the node-BNN MLP and CNN, their tuned defaults, training."""

import numpy as np
import pytest

import tfp_bnn
import zoo
from tfp_bnn.layers import NodeConv2D
from tfp_bnn.layers import NodeDense
from tfp_bnn.posteriors import NodeFlow
from tfp_bnn.posteriors.node import get_node_posterior
from zoo.models import node_bnn
from zoo.models.digits import DIGITS


def _node_layers(model):
    return [layer for layer in model.layers if isinstance(layer, (NodeDense, NodeConv2D))]


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_registry_node_bnn_is_the_tuned_flow_mlp(task):
    model = zoo.build_model("node_bnn", (8,), task=task,
                            num_classes=3 if task == "classification" else None, num_train=100)
    layers = tfp_bnn.bayesian_layers(model)
    assert len(layers) == (2 if task == "regression" else 3)
    tuned = node_bnn.TUNED[("mlp", "flow")]
    for layer in layers:
        assert type(layer) is NodeDense
        assert layer.posterior == NodeFlow("planar", node_bnn.FLOW_LENGTH)
        assert layer.num_components == node_bnn.NUM_COMPONENTS == 4
        assert layer.prior_stddev == tuned["prior_stddev"]
        assert layer.entropy_weight == tuned["entropy_weight"]


@pytest.mark.parametrize("posterior", ["flow", "gaussian"])
def test_digits_mlp_structure(posterior):
    model = node_bnn.node_bnn_mlp(**DIGITS, num_train=100, posterior=posterior, seed=1)
    layers = _node_layers(model)
    assert [layer.units for layer in layers] == [128, 128, 10]
    for layer in layers:
        assert layer.posterior == get_node_posterior(posterior)
        assert layer.noise == "input"
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / 100)
    assert model.output_shape == (None, 10)
    assert len({layer.seed for layer in layers}) == len(layers)


def test_digits_cnn_structure():
    model = node_bnn.node_bnn_cnn_flow(**DIGITS, num_train=100, seed=0)
    layers = _node_layers(model)
    assert [type(layer).__name__ for layer in layers] == ["NodeConv2D", "NodeConv2D",
                                                           "NodeDense", "NodeDense"]
    assert [layer.filters for layer in layers[:2]] == [16, 32]
    assert [layer.units for layer in layers[2:]] == [64, 10]
    assert model.output_shape == (None, 10)


@pytest.mark.parametrize("builder", [node_bnn.node_bnn_mlp_flow, node_bnn.node_bnn_cnn_gaussian])
def test_fits_and_predicts(builder):
    rng = np.random.default_rng(0)
    x = rng.random((64, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 10, 64).astype("int32")
    model = builder(**DIGITS, num_train=64, seed=0)
    history = model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    pred = tfp_bnn.predict.classification(model, x[:5], num_samples=8)
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-6)
    assert np.all(pred.mutual_information > 0)


@pytest.mark.parametrize("kwargs, name", [({"posterior": "laplace"}, "posterior"),
                                          ({"num_components": 0}, "num_components"),
                                          ({"hidden_units": (0,)}, "hidden_units")])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        node_bnn.node_bnn_mlp(**DIGITS, num_train=10, **kwargs)


def test_defaults_are_the_tuned_settings():
    from zoo.experiments import node_bnn_tuning  # noqa: PLC0415

    grid = node_bnn_tuning.GRID
    for (architecture, posterior), setting in node_bnn.TUNED.items():
        builder = getattr(node_bnn, f"node_bnn_{architecture}")
        model = builder(**DIGITS, num_train=100, posterior=posterior, seed=0)
        nodes = _node_layers(model)
        assert nodes
        for layer in nodes:
            assert layer.prior_stddev == setting["prior_stddev"]
            assert layer.entropy_weight == setting["entropy_weight"]
        # Every tuned value is a point of the tuning grid.
        assert all(setting[name] in grid[name] for name in setting)
    # An explicit argument still wins over the tuned value.
    model = node_bnn.node_bnn_mlp_flow(**DIGITS, num_train=100, entropy_weight=0.0)
    assert all(layer.entropy_weight == 0.0 for layer in _node_layers(model))

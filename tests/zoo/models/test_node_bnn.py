"""The node-BNN zoo models for the digits: structure, training, prediction."""

import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import NodeConv2D
from tfp_bnn.layers import NodeDense
from zoo.models import node_bnn


def _node_layers(model):
    return [layer for layer in model.layers if isinstance(layer, (NodeDense, NodeConv2D))]


@pytest.mark.parametrize("posterior", ["flow", "gaussian"])
def test_mlp_structure(posterior):
    model = node_bnn.node_bnn_mlp(num_train=100, posterior=posterior, seed=1)
    layers = _node_layers(model)
    assert [layer.units for layer in layers] == [128, 128, 10]
    for layer in layers:
        assert layer.posterior == posterior
        assert layer.num_components == node_bnn.NUM_COMPONENTS
        assert layer.noise == "input"
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / 100)
    assert model.output_shape == (None, 10)
    assert len({layer.seed for layer in layers}) == len(layers)


def test_cnn_structure():
    model = node_bnn.node_bnn_cnn_flow(num_train=100, seed=0)
    layers = _node_layers(model)
    assert [type(layer).__name__ for layer in layers] == ["NodeConv2D", "NodeConv2D",
                                                           "NodeDense", "NodeDense"]
    assert model.output_shape == (None, 10)


@pytest.mark.parametrize("builder", [node_bnn.node_bnn_mlp_flow, node_bnn.node_bnn_cnn_gaussian])
def test_fits_and_predicts(builder):
    rng = np.random.default_rng(0)
    x = rng.random((64, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 10, 64).astype("int32")
    model = builder(num_train=64, seed=0)
    history = model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    pred = tfp_bnn.predict.classification(model, x[:5], num_samples=8)
    np.testing.assert_allclose(pred.probs.sum(-1), 1.0, rtol=1e-6)
    assert np.all(pred.mutual_information > 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="posterior"):
        node_bnn.node_bnn_mlp(num_train=10, posterior="laplace")
    with pytest.raises(ValueError, match="num_components"):
        node_bnn.node_bnn_mlp(num_train=10, num_components=0)
    with pytest.raises(ValueError, match="hidden_units"):
        node_bnn.node_bnn_mlp(num_train=10, hidden_units=(0,))


def test_ready_models_take_the_tuned_settings():
    from zoo.experiments import node_bnn_tuning

    grid = node_bnn_tuning.GRID
    for (architecture, posterior), setting in node_bnn.TUNED.items():
        builder = getattr(node_bnn, f"node_bnn_{architecture}_{posterior}")
        model = builder(num_train=100, seed=0)
        nodes = [layer for layer in model.layers if hasattr(layer, "entropy_weight")]
        assert nodes
        for layer in nodes:
            assert layer.prior_stddev == setting["prior_stddev"]
            assert layer.entropy_weight == setting["entropy_weight"]
        # Every tuned value is a point of the tuning grid.
        assert all(setting[name] in grid[name] for name in setting)
    # An explicit argument still wins over the tuned value.
    model = node_bnn.node_bnn_mlp_flow(num_train=100, entropy_weight=0.0)
    assert all(layer.entropy_weight == 0.0 for layer in model.layers
               if hasattr(layer, "entropy_weight"))

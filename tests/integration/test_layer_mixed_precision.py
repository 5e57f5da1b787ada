"""Mixed precision: float16 compute, float32 variables and KL terms, for every layer."""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.flows import NormalizingFlow
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import MCDropout
from tfp_bnn.layers import NodeConv2D
from tfp_bnn.layers import NodeDense
from tfp_bnn.posteriors import FlowPosterior
from zoo.models._common import build_optimizer



@pytest.mark.parametrize("extra", [{}, {"prior": "scale_mixture", "bayesian_bias": True}],
                         ids=["analytic_kl", "mc_kl_bayesian_bias"])
def test_every_layer_trains_under_mixed_float16(mixed_float16, extra):
    rng = np.random.default_rng(0)
    x = rng.random((64, 6, 6, 2)).astype("float32")
    y = rng.integers(0, 3, 64)
    model = keras.Sequential([
        keras.Input((6, 6, 2)), Conv2DFlipout(4, 3, seed=0, **extra),
        Conv2DReparameterization(4, 3, seed=1, **extra), keras.layers.Flatten(),
        DenseReparameterization(8, activation="relu", seed=2, **extra),
        DenseLocalReparameterization(8, seed=3, **extra), DenseFlipout(3, seed=4, **extra),
        keras.layers.Activation("linear", dtype="float32"),
    ])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    build_optimizer(model)  # fit then traces its step once
    history = model.fit(x, y, epochs=2, verbose=0, callbacks=[KLScheduler(64)])
    assert np.all(np.isfinite(history.history["loss"]))
    assert np.all(np.isfinite(history.history["kl"])) and history.history["kl"][0] > 0
    model(x[:2])
    bayesian = [layer for layer in model.layers if hasattr(layer, "kl_divergence")]
    assert len(bayesian) == 5
    for layer in bayesian:
        assert layer.compute_dtype == "float16"
        assert layer.kernel_params[0].dtype == "float32"
        assert layer.losses[0].dtype == "float32"  # the KL is computed in float32


# --- node layers, flow posteriors and MC dropout ---------------------------------------------

# Every flow step kind, chained: each flow of the model below has one step of each.
FLOWS = ["planar", "radial", "sylvester", "batch_norm"]


def _node_args(kind):
    if kind == "gaussian":
        return {"posterior": "gaussian", "entropy_weight": 0.1}
    return {"posterior": "flow", "flows": FLOWS if kind == "all_flows" else kind,
            "flow_length": len(FLOWS) if kind == "all_flows" else 1}


def _flows_of(layer):
    names = ("kernel_flow", "bias_flow", "input_flow", "output_flow")
    return [f for f in (getattr(layer, n, None) for n in names) if isinstance(f, NormalizingFlow)]


def _float32_twin(layer):
    """The same layer (config, weights, seed state) under the float32 policy."""
    config = layer.get_config()
    config["dtype"] = "float32"
    twin = type(layer).from_config(config)
    twin.build(layer.input.shape)
    twin.set_weights(layer.get_weights())
    twin.seed_generator.state.assign(layer.seed_generator.state)
    return twin


def test_node_flow_and_dropout_layers_train_under_mixed_float16(mixed_float16):
    """NodeConv2D and NodeDense with every flow kind and the Gaussian, MCDropout, a flow posterior.

    One model, so that the training step is traced once: each flow chains one
    step of every kind. Pooling keeps the NodeDense flows small (a Sylvester
    step's cost grows with its event size).
    """
    rng = np.random.default_rng(1)
    x = rng.random((64, 6, 6, 2)).astype("float32")
    y = rng.integers(0, 3, 64)
    flows = _node_args("all_flows")
    model = keras.Sequential([
        keras.Input((6, 6, 2)),
        NodeConv2D(4, 3, activation="relu", noise="both", num_components=2, seed=0, **flows),
        keras.layers.GlobalAveragePooling2D(), MCDropout(0.1, seed=1),
        NodeDense(6, activation="relu", noise="input", seed=2, **flows),
        NodeDense(6, activation="relu", noise="output", num_components=2, seed=3,
                  **_node_args("gaussian")),
        DenseReparameterization(3, posterior=FlowPosterior(FLOWS, length=4, sylvester_rank=2),
                                prior="scale_mixture", seed=4),
        keras.layers.Activation("linear", dtype="float32"),
    ])
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    build_optimizer(model)  # fit then traces its step once
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0, callbacks=[KLScheduler(64)])
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert np.all(np.isfinite(history.history["kl"])) and history.history["kl"][0] > 0

    model(x[:8], training=True)
    stochastic = [layer for layer in model.layers if getattr(layer, "stochastic_layer", False)]
    assert len(stochastic) == 5
    all_flows = []
    for layer in stochastic:
        assert layer.compute_dtype == "float16"
        floats = [w for w in layer.weights if "float" in w.dtype]
        assert floats and all(w.dtype == "float32" for w in floats), layer.name
        if not isinstance(layer, MCDropout):
            assert [loss.dtype for loss in layer.losses] == ["float32"], layer.name
        all_flows += _flows_of(layer)
    # A flow per node site (2 + 1) and one for the Dense kernel, each with every step kind.
    assert len(all_flows) == 4
    for flow in all_flows:
        assert flow.step_names == FLOWS
        assert flow.compute_dtype == "float32" and flow.variable_dtype == "float32"
        dim = flow.steps[0]["w"].shape[-1]  # step 0 is planar: w has the event size
        z, log_det = flow(keras.random.normal((5, dim), seed=0, dtype="float16"))
        assert z.dtype == "float32" and log_det.dtype == "float32"


@pytest.mark.parametrize("kind", ["gaussian", "all_flows"])
def test_node_kl_under_mixed_float16_equals_the_float32_kl(mixed_float16, kind):
    """The node KL and entropy never touch float16: same value as a float32 twin.

    z, log q0, the flow's log|det J| and log p are float32 under any policy; a
    KL computed in float16 would differ by ~1e-3 relative (float16 has 11 bits).
    """
    for cls, shape in ((NodeDense, (None, 5)), (NodeConv2D, (None, 4, 4, 3))):
        kwargs = {"filters": 3, "kernel_size": 2} if cls is NodeConv2D else {"units": 3}
        layer = cls(noise="both", num_components=2, seed=7, **kwargs, **_node_args(kind))
        keras.Sequential([keras.Input(shape[1:]), layer])
        for site in layer.sites:  # a KL of order 1e3, far from the prior N(1, 0.1^2)
            for name, value in (("loc", 3.0), ("rho", -4.0)):
                variable = getattr(layer, f"{site}_{name}")
                variable.assign(np.full(variable.shape, value, "float32"))
        twin = _float32_twin(layer)
        assert layer.compute_dtype == "float16" and twin.compute_dtype == "float32"
        kl, twin_kl = layer.kl_divergence(256), twin.kl_divergence(256)
        assert kl.dtype == "float32" and float(kl) > 1000
        np.testing.assert_allclose(float(kl), float(twin_kl), rtol=1e-6)
        twin.seed_generator.state.assign(layer.seed_generator.state)
        np.testing.assert_allclose(float(layer.entropy(256)), float(twin.entropy(256)),
                                   rtol=1e-6, atol=1e-4)


def test_analytic_kl_under_mixed_float16_is_the_float32_closed_form(mixed_float16):
    """The weight-space KL of the forward pass, to float32 precision, from float16 compute."""
    layer = DenseFlipout(6, kl_weight=1.0, bayesian_bias=True, seed=0)
    layer.build((None, 5))
    rng = np.random.default_rng(0)
    expected = 0.0
    for loc, rho in (layer.kernel_params, layer.bias_params):
        mu = rng.normal(0.0, 0.7, loc.shape).astype("float32")
        r = rng.normal(-4.0, 1.0, rho.shape).astype("float32")
        loc.assign(mu)
        rho.assign(r)
        sigma = np.log1p(np.exp(r.astype("float64")))
        expected += np.sum(0.5 * (sigma**2 + mu.astype("float64") ** 2 - 1) - np.log(sigma))
    outputs = layer(np.ones((4, 5), "float32"), training=True)
    assert outputs.dtype == "float16" and layer.losses[0].dtype == "float32"
    # float16 would carry ~5e-4 relative error on a KL of this size (~150).
    np.testing.assert_allclose(float(layer.losses[0]), expected, rtol=2e-6)

"""Numeric safety: extreme posterior scales, large and float16 inputs keep losses finite.

Every weight-space and node layer, with every prior / posterior / KL option
it has, is driven to the edges of its parameter domain: each posterior
scale parameter rho (sigma = softplus(rho)) at +50 (sigma = 50) and at -50
(sigma = 2e-22, far below float16's range), and each flow step at the edge of
its own domain. The layer is called in training mode on float16 inputs of
unit scale and of scale 1e3, and a scalar loss (a pseudo-Huber data term on
the outputs plus the layer's KL losses) is differentiated with respect to
every trainable variable and the inputs. Loss, KL and every gradient must be
finite, and the rho gradients must not vanish (a "fix" that cut them would
hide the problem rather than solve it).

Flow parameters at the edge, per step kind:
    planar:     w^T u = +-50, i.e. w^T u_hat = m(+-50): 49, or -1 + 2e-22
                (nearly singular);
    radial:     alpha_raw = beta_raw = +-50 (alpha = 50 or 2e-22);
    sylvester:  diag(r_raw) = +-50, i.e. r_ii r~_ii = m(+-50);
    batch_norm: log_scale = log(softplus(+-50)) = log(50) or -50. This one is
                a log, not a softplus argument: log_scale = +50 would scale z
                by e^50 per step and put the true KL (~1e45) beyond float32,
                so it spans the same range of scales as sigma = softplus(rho).
The Sylvester diagonal of R~ (a log too) is left as initialised: it only
trades scale between R and R~ (r_ii r~_ii = m(c) whatever it is), and at
-50 it sets r_ii = m(c) e^50, again beyond float32.

The same sweep runs under `mixed_float16` (float16 compute) with unit-scale
inputs, and with the initial posteriors on inputs of magnitude up to ~300:
|x| >= 256 overflows x^2 in float16.

Each policy builds its layers once and runs them for every setting,
restoring the initial variables in between; the assertions are then one
test per case. The flows are one step long and Sylvester steps have rank 2,
which keeps the sweep fast without leaving out any kind of step.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

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

EXTREME = 50.0
FLOWS = ["planar", "radial", "sylvester", "batch_norm"]
DENSE_INPUT = (8, 4)
CONV_INPUT = (4, 5, 5, 2)
WEIGHT_OPTIONS = {
    "analytic_kl": {},
    "mc_kl": {"kl_estimator": "mc"},
    "scale_mixture_mc_kl_bayesian_bias": {"prior": "scale_mixture", "bayesian_bias": True},
}


def _weight_cases():
    cases = {}
    for cls in (DenseReparameterization, DenseFlipout, DenseLocalReparameterization):
        for option, kwargs in WEIGHT_OPTIONS.items():
            cases[f"{cls.__name__}-{option}"] = ("dense", cls, dict(units=3, **kwargs))
    for cls in (Conv2DReparameterization, Conv2DFlipout):
        for option, kwargs in WEIGHT_OPTIONS.items():
            cases[f"{cls.__name__}-{option}"] = (
                "conv", cls, dict(filters=2, kernel_size=3, **kwargs))
    for flow in FLOWS:
        cases[f"DenseReparameterization-flow_{flow}-bayesian_bias"] = (
            "dense", DenseReparameterization,
            dict(units=3, posterior=FlowPosterior(flows=flow, length=1, sylvester_rank=2),
                 bayesian_bias=True))
    cases["Conv2DReparameterization-flow_all_kinds-scale_mixture"] = (
        "conv", Conv2DReparameterization,
        dict(filters=2, kernel_size=3,
             posterior=FlowPosterior(flows=FLOWS, length=4, sylvester_rank=2),
             prior="scale_mixture"))
    return cases


def _node_cases():
    cases = {}
    posteriors = {"gaussian": dict(posterior="gaussian", entropy_weight=0.5),
                  "flow_length_0": dict(posterior="flow", flow_length=0)}
    posteriors.update({f"flow_{flow}": dict(posterior="flow", flows=flow, flow_length=1)
                       for flow in FLOWS})
    for name, kwargs in posteriors.items():
        common = dict(noise="both", num_components=2, **kwargs)
        cases[f"NodeDense-{name}"] = ("dense", NodeDense, dict(units=3, **common))
        cases[f"NodeConv2D-{name}"] = (
            "conv", NodeConv2D, dict(filters=2, kernel_size=3, **common))
    return cases


CASES = {**_weight_cases(), **_node_cases(),
         "MCDropout-dense": ("dense", MCDropout, dict(rate=0.5)),
         "MCDropout-conv_channels": ("conv", MCDropout, dict(rate=0.9,
                                                             noise_shape=(None, 1, 1, 2)))}


def _build(policy):
    """Every case's layer, built under `policy`, in the order of CASES."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        layers = {}
        for seed, (name, (family, cls, kwargs)) in enumerate(CASES.items()):
            if cls is not MCDropout:
                kwargs = dict(kwargs, kl_weight=1.0)
            layer = cls(seed=seed, **kwargs)
            layer.build(DENSE_INPUT if family == "dense" else CONV_INPUT)
            layers[name] = layer
        return layers
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _rhos(layer):
    """The posterior scale parameters rho (sigma = softplus(rho)) of a layer."""
    if hasattr(layer, "kernel_params"):  # weight-space: (loc, rho, *flow variables)
        params = [layer.kernel_params, layer.bias_params]
        return [p[1] for p in params if p is not None]
    return [getattr(layer, f"{site}_rho") for site in getattr(layer, "sites", ())]


def _flows(layer):
    names = ("kernel_flow", "bias_flow", "input_flow", "output_flow")
    return [f for f in (getattr(layer, n, None) for n in names) if isinstance(f, NormalizingFlow)]


def _set_extremes(layer, sign, flows):
    """rho = sign * 50 and, if `flows`, every flow step at the edge of its domain on that side."""
    for rho in _rhos(layer):
        rho.assign(tf.fill(rho.shape, sign * EXTREME))
    for flow in _flows(layer) if flows else ():
        for kind, params in zip(flow.step_names, flow.steps):
            if kind == "planar":
                w, u = params["w"].numpy(), params["u"].numpy()
                params["u"].assign(u + (sign * EXTREME - w @ u) * w / (w @ w))
            elif kind == "radial":
                params["alpha_raw"].assign(sign * EXTREME)
                params["beta_raw"].assign(sign * EXTREME)
            elif kind == "sylvester":
                r_raw = params["r_raw"].numpy()
                np.fill_diagonal(r_raw, sign * EXTREME)
                params["r_raw"].assign(r_raw)
            else:
                log_scale = math.log(EXTREME) if sign > 0 else -EXTREME
                params["log_scale"].assign(tf.fill(params["log_scale"].shape, log_scale))


def _step(layer, x):
    """(loss, KL, gradients w.r.t. [inputs, *trainable variables]) of one training call."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.cast(layer(x, training=True), "float32")
        # Pseudo-Huber: a data term whose output gradient is bounded by 1/n, so
        # that float16 backward passes cannot overflow on the data side.
        data = tf.reduce_mean(tf.sqrt(1.0 + tf.square(y)))
        kl = tf.add_n(layer.losses) if layer.losses else tf.zeros([])
        loss = data + tf.cast(kl, "float32")
    return loss, kl, tape.gradient(loss, [x] + list(layer.trainable_variables))


def _sweep(policy, settings):
    """{case: [(setting, loss, kl, kl dtype, {variable: gradient}, rho gradients)]}.

    `settings` lists (label, sign or None for the initial posterior, whether
    the flows go to their edges too, input scale). Eager: every layer runs
    once per setting, and tracing the flows would cost more than running them.
    """
    layers = _build(policy)
    initial = {name: [v.numpy() for v in layer.weights] for name, layer in layers.items()}
    rng = np.random.default_rng(0)
    inputs = {"dense": rng.normal(size=DENSE_INPUT), "conv": rng.normal(size=CONV_INPUT)}
    results = {name: [] for name in layers}
    for label, sign, flows, scale in settings:
        for name, layer in layers.items():
            for variable, value in zip(layer.weights, initial[name]):
                variable.assign(value)
            if sign is not None:
                _set_extremes(layer, sign, flows)
            x = tf.constant(inputs[CASES[name][0]] * scale, "float16")
            loss, kl, grads = _step(layer, x)
            paths = ["inputs"] + [v.path for v in layer.trainable_variables]
            gradients = {p: None if g is None else np.asarray(tf.convert_to_tensor(g))
                         for p, g in zip(paths, grads)}
            rho_gradients = [gradients[r.path] for r in _rhos(layer)]
            results[name].append((label, float(loss), float(kl), kl.dtype, gradients,
                                  rho_gradients))
    return layers, results


@pytest.fixture(scope="module")
def float32_sweep():
    keras.utils.set_random_seed(0)
    settings = [(f"rho={sign * EXTREME:+g}, |x|~{scale:g}", sign, True, scale)
                for sign in (1.0, -1.0) for scale in (1.0, 1e3)]
    return _sweep("float32", settings)


@pytest.fixture(scope="module")
def mixed_sweep():
    keras.utils.set_random_seed(0)
    # The flows compute in float32 under any policy (their edges are covered
    # above); at their edges the weights they output exceed float16's range.
    settings = [("rho=+50, |x|~1", 1.0, False, 1.0), ("rho=-50, |x|~1", -1.0, False, 1.0),
                ("initial posterior, |x| up to ~300", None, False, 100.0)]
    return _sweep("mixed_float16", settings)


def _check(layers, results, name):
    layer = layers[name]
    has_kl = not isinstance(layer, MCDropout)
    for label, loss, kl, kl_dtype, gradients, rho_gradients in results[name]:
        where = f"{name} at {label}"
        assert math.isfinite(loss), f"{where}: loss {loss}"
        assert math.isfinite(kl), f"{where}: KL {kl}"
        if has_kl:
            assert kl_dtype == tf.float32, f"{where}: KL in {kl_dtype.name}"
        for path, gradient in gradients.items():
            assert gradient is not None, f"{where}: no gradient for {path}"
            assert np.all(np.isfinite(gradient)), f"{where}: non-finite gradient for {path}"
        for gradient in rho_gradients:
            assert np.any(gradient != 0), f"{where}: the rho gradient vanished"
    return layer


@pytest.mark.parametrize("name", list(CASES))
def test_extreme_scales_and_float16_inputs_give_finite_loss_and_gradients(float32_sweep, name):
    layers, results = float32_sweep
    layer = _check(layers, results, name)
    assert layer.compute_dtype == "float32"
    assert len(results[name]) == 4


@pytest.mark.parametrize("name", list(CASES))
def test_extreme_scales_under_mixed_float16_give_finite_loss_and_gradients(mixed_sweep, name):
    layers, results = mixed_sweep
    layer = _check(layers, results, name)
    assert layer.compute_dtype == "float16"
    assert len(results[name]) == 3


def test_the_sweep_really_reaches_the_extremes(float32_sweep):
    """sigma = 50 and sigma = 2e-22 give the closed-form KL of N(mu, sigma) || N(0, 1)."""
    layers, results = float32_sweep
    name = "DenseReparameterization-analytic_kl"
    count = math.prod(layers[name].kernel_params[0].shape)
    by_label = {label: kl for label, _, kl, *_ in results[name]}
    # sum of 0.5 (sigma^2 + mu^2 - 1) - log sigma; |mu| < 1 (Glorot) bounds the mu part.
    high = count * (0.5 * (EXTREME**2 - 1) - math.log(EXTREME))
    low = count * (-0.5 + EXTREME)  # -log softplus(-50) = 50 - 2e-22
    assert high <= by_label["rho=+50, |x|~1"] <= high + 0.5 * count
    assert low <= by_label["rho=-50, |x|~1"] <= low + 0.5 * count

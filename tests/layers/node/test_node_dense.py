"""NodeDense: node noise per example, components, the KL estimators, fit, prediction, saving."""

import math
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import _tracing
from tfp_bnn.layers.node.node_dense import NodeDense
from tfp_bnn.posteriors import NodeFlow
from tfp_bnn.posteriors import NodeGaussian

# softplus(-40) ~ 4e-18: z equals its mean to float32 precision.
_NO_NOISE_RHO = -40.0
NOISES = ["input", "output", "both"]


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _softplus(x):
    return np.log1p(np.exp(np.asarray(x, np.float64)))


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _set_nodes(layer, site, loc, rho):
    getattr(layer, f"{site}_loc").assign(np.broadcast_to(loc, getattr(layer, f"{site}_loc").shape))
    getattr(layer, f"{site}_rho").assign(np.broadcast_to(rho, getattr(layer, f"{site}_rho").shape))


def _random_posterior(layer, seed):
    """Random node posteriors; returns {site: (mu, sigma)} in float64."""
    rng = np.random.default_rng(seed)
    out = {}
    for site in layer.sites:
        shape = getattr(layer, f"{site}_loc").shape
        _set_nodes(layer, site, rng.normal(1.0, 0.3, shape).astype("float32"),
                   rng.normal(-2.0, 0.5, shape).astype("float32"))
        out[site] = (getattr(layer, f"{site}_loc").numpy().astype(np.float64),
                     _softplus(getattr(layer, f"{site}_rho").numpy()))
    return out


def _gaussian_kl(mu, sigma, m, s):
    """sum_d KL(N(mu, sigma^2) || N(m, s^2)) averaged over the components (rows)."""
    kl = np.log(s / sigma) + (sigma**2 + (mu - m) ** 2) / (2 * s**2) - 0.5
    return kl.sum(axis=1).mean()


def _gaussian_entropy(sigma):
    return (0.5 * np.log(2 * np.pi * np.e) + np.log(sigma)).sum(axis=1).mean()


# --- shapes and the deterministic limit --------------------------------------------------


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_shapes_symbolic_and_eager_for_every_noise_site(noise, posterior):
    kwargs = dict(noise=noise, posterior=posterior, num_components=3, kl_weight=0.5)
    layer = NodeDense(6, **kwargs)  # flows: 2 planar steps per site
    symbolic = layer(keras.Input((5, 4)))
    assert tuple(symbolic.shape) == (None, 5, 6)
    y = _np(layer(_inputs((7, 5, 4))))
    assert y.shape == (7, 5, 6) and np.all(np.isfinite(y))
    assert layer.compute_output_shape((7, 5, 4)) == (7, 5, 6)
    assert len(layer.losses) == 1 and np.isfinite(float(layer.losses[0]))
    for site in layer.sites:
        nodes = 4 if site == "input" else 6
        assert getattr(layer, f"{site}_loc").shape == (3, nodes)
        assert getattr(layer, f"{site}_rho").shape == (3, nodes)
    other = {"input": "output", "output": "input"}.get(noise)
    if other is not None:
        assert getattr(layer, f"{other}_loc") is None


# On JAX the forward pass is checked against Keras by the NodeConv2D twin of this test.
@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("training", [True, False])
def test_unit_means_and_vanishing_scales_give_the_deterministic_dense(noise, training):
    layer = NodeDense(5, activation="tanh", noise=noise, num_components=2, kl_weight=1.0, seed=0)
    layer.build((None, 4))
    layer.bias.assign(np.linspace(-1, 1, 5).astype("float32"))
    for site in layer.sites:
        _set_nodes(layer, site, 1.0, _NO_NOISE_RHO)
    dense = keras.layers.Dense(5, activation="tanh")
    dense.build((None, 4))
    dense.set_weights([layer.kernel.numpy(), layer.bias.numpy()])
    x = _inputs((9, 4))
    np.testing.assert_allclose(_np(layer(x, training=training)), _np(dense(x)),
                               rtol=1e-6, atol=1e-6)


# --- one z per example ---------------------------------------------------------------------


def _square_layer(noise, loc, sigma, num_components=1, seed=1, **kwargs):
    """4 -> 4 NodeDense with an invertible kernel, bias and no activation."""
    layer = NodeDense(4, noise=noise, num_components=num_components, kl_weight=1.0, seed=seed,
                      **kwargs)
    layer.build((None, 4))
    layer.kernel.assign((np.eye(4) + 0.3 * np.tri(4, k=-1)).astype("float32"))
    layer.bias.assign(np.array([0.5, -0.2, 0.1, 0.3], "float32"))
    for site in layer.sites:
        _set_nodes(layer, site, loc, np.log(np.expm1(sigma)))
    return layer


def _recover_z(layer, x, y, site):
    """z per row and position from the layer's inputs and outputs (no activation)."""
    kernel, bias = layer.kernel.numpy().astype(np.float64), layer.bias.numpy()
    if site == "output":
        return y / (x @ kernel + bias)
    return ((y - bias) @ np.linalg.inv(kernel)) / x


@pytest.mark.parametrize("site", ["input", "output"])
def test_each_example_gets_one_z_shared_over_its_positions(site):
    layer = _square_layer(site, 1.0, 0.2)
    x = np.repeat(_inputs((1, 6, 4), seed=3), 3, axis=0)  # 3 identical examples
    y = _np(layer(x)).astype(np.float64)
    z = _recover_z(layer, x.astype(np.float64), y, site)
    # One z per example: the same at every position, to float32 round-off.
    np.testing.assert_allclose(z, np.broadcast_to(z[:, :1], z.shape), rtol=2e-4)
    # Identical examples get different draws.
    assert not np.allclose(y[0], y[1]) and not np.allclose(y[1], y[2])


def test_per_example_z_follows_the_posterior_moments():
    n = 20_000
    mu = np.array([0.8, 1.0, 1.2, 1.5])
    sigma = np.array([0.05, 0.1, 0.2, 0.3])
    layer = _square_layer("output", mu.astype("float32"), sigma.astype("float32"))
    x = np.ones((n, 4), "float32")
    for training in (True, False):
        z = _recover_z(layer, x.astype(np.float64), _np(layer(x, training=training)), "output")
        # 5 standard errors of the mean (sigma / sqrt n) and of the standard
        # deviation (~ sigma / sqrt(2n) for a normal sample).
        assert np.all(np.abs(z.mean(0) - mu) < 5 * sigma / math.sqrt(n))
        assert np.all(np.abs(z.std(0) - sigma) < 5 * sigma / math.sqrt(2 * n))
        # Independent draws across examples: correlation of rows i, i+1 ~ 0.
        r = np.corrcoef(z[:-1, 0], z[1:, 0])[0, 1]
        assert abs(r) < 5 / math.sqrt(n)


# --- mixture components -----------------------------------------------------------------------

_COMPONENT_MEANS = np.array([[1.0], [2.0], [3.0]], "float32")


@pytest.mark.parametrize("site", ["input", "output"])
@pytest.mark.parametrize("training", [True, False])
def test_row_i_uses_component_i_mod_k(site, training):
    layer = _square_layer(site, _COMPONENT_MEANS, 1e-6, num_components=3)
    x = _inputs((8, 4), seed=4) + 3.0  # away from 0, so z is recoverable
    z = _recover_z(layer, x.astype(np.float64), _np(layer(x, training=training)), site)
    expected = (np.arange(8) % 3 + 1.0)[:, None] * np.ones(4)
    np.testing.assert_allclose(z, expected, rtol=1e-3)


def test_inside_a_sample_trace_the_sample_index_picks_the_component():
    layer = _square_layer("output", _COMPONENT_MEANS[:2], 1e-6, num_components=2)
    samples, batch = 5, 3
    x = _inputs((batch, 4), seed=5) + 3.0
    tiled = np.tile(x, (samples, 1))  # row s * B + b
    with _tracing.sample_trace(samples):
        y = _np(layer(tiled, training=False))
    z = _recover_z(layer, tiled.astype(np.float64), y, "output")
    expected = np.repeat(np.arange(samples) % 2 + 1.0, batch)[:, None] * np.ones(4)
    np.testing.assert_allclose(z, expected, rtol=1e-3)
    assert len(layer.losses) == 0  # prediction graph: no KL


@pytest.mark.jax
def test_predict_classification_alternates_components_over_samples():
    layer = NodeDense(3, noise="output", num_components=2, kl_weight=1.0, seed=6)
    model = keras.Sequential([keras.Input((4,)), layer])
    layer.output_loc.assign(np.array([[3.0, 0.1, 0.1], [0.1, 0.1, 3.0]], "float32"))
    layer.output_rho.assign(np.full((2, 3), -12.0, "float32"))
    layer.bias.assign(np.ones(3, "float32"))
    layer.kernel.assign(np.zeros((4, 3), "float32"))
    x = _inputs((5, 4), seed=7)
    pred = tfp_bnn.predict.classification(model, x, num_samples=8, keep_samples=True,
                                          batch_size=2, samples_per_call=4)
    samples = pred.sample_probs  # [T, N, 3]
    assert samples.shape == (8, 5, 3) and pred.probs.shape == (5, 3)
    winners = samples.argmax(-1)
    np.testing.assert_array_equal(winners, np.where(np.arange(8) % 2 == 0, 0, 2)[:, None]
                                  * np.ones((1, 5), int))
    # The predictive distribution averages the two components equally.
    np.testing.assert_allclose(pred.probs[:, 0], pred.probs[:, 2], rtol=1e-5)


# --- KL and entropy ----------------------------------------------------------------------


@pytest.mark.parametrize("noise", NOISES)
def test_gaussian_kl_is_the_component_averaged_closed_form(noise):
    prior_mean, prior_stddev, kl_weight = 0.9, 0.3, 0.25
    layer = NodeDense(5, noise=noise, num_components=3, prior_mean=prior_mean,
                      prior_stddev=prior_stddev, kl_weight=kl_weight)
    layer.build((None, 4))
    params = _random_posterior(layer, 0)
    expected = sum(_gaussian_kl(mu, s, prior_mean, prior_stddev) for mu, s in params.values())
    entropy = sum(_gaussian_entropy(s) for _, s in params.values())
    layer(_inputs((6, 4)), training=True)
    assert float(layer.losses[0]) == pytest.approx(kl_weight * expected, rel=1e-5)
    assert float(layer.kl_divergence()) == pytest.approx(expected, rel=1e-5)
    assert float(layer.entropy()) == pytest.approx(entropy, rel=1e-5)


def test_inspection_distributions_agree_with_the_layer():
    layer = NodeDense(3, noise="both", num_components=2, prior_mean=0.8, prior_stddev=0.3,
                      kl_weight=1.0)
    layer.build((None, 4))
    params = _random_posterior(layer, 5)
    kl = 0.0
    for site, (mu, sigma) in params.items():
        q, p = layer.node_posterior(site), layer.node_prior(site)
        assert q.event_shape == p.event_shape == (mu.shape[1],)
        components = q.components_distribution
        np.testing.assert_allclose(components.mean().numpy(), mu, rtol=1e-6)
        np.testing.assert_allclose(components.stddev().numpy(), sigma, rtol=1e-5)
        kl += float(tf.reduce_mean(tfp_kl(components, p)))
    assert float(layer.kl_divergence()) == pytest.approx(kl, rel=1e-5)
    flow_layer, _ = _flow_layer()
    q = flow_layer.node_posterior("output")
    # Planar steps have no inverse: log q from the base draw and the forward log-det.
    z0 = q.distribution.sample(5, seed=(1, 2))
    log_q = (q.distribution.log_prob(z0)
             - q.bijector.forward_log_det_jacobian(z0, event_ndims=1)).numpy()
    assert log_q.shape == (5,) and np.all(np.isfinite(log_q))


def tfp_kl(q, p):
    return tfp.distributions.kl_divergence(q, p)


def _kl_draws(layer, x, n):
    @tf.function
    def draw():
        layer(x, training=True)
        return layer.losses[0]

    return np.asarray([float(draw()) for _ in range(n)])


@pytest.mark.parametrize("noise", ["input", "both"])
def test_flow_kl_without_flow_steps_is_unbiased_for_the_closed_form(noise):
    kwargs = dict(noise=noise, num_components=2, prior_stddev=0.4, kl_weight=1.0)
    mc = NodeDense(3, posterior="flow", flow_length=0, seed=8, **kwargs)
    exact = NodeDense(3, posterior="gaussian", **kwargs)
    mc.build((None, 4))
    exact.build((None, 4))
    _random_posterior(mc, 1)
    exact.set_weights(mc.get_weights())
    expected = float(exact.kl_divergence())
    draws = _kl_draws(mc, _inputs((16, 4)), 300)  # 16 rows: 8 per component
    standard_error = draws.std(ddof=1) / math.sqrt(draws.size)
    assert standard_error > 0
    assert abs(draws.mean() - expected) < 5 * standard_error
    # Each draw averages rows: it has less spread than a single-row estimate.
    single = _kl_draws(mc, _inputs((2, 4)), 300)
    assert draws.std() < single.std()


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_entropy_weight_subtracts_exactly_weight_times_gamma_times_entropy(posterior):
    gamma, kl_weight = 0.7, 0.3
    kwargs = dict(noise="both", posterior=posterior, flow_length=0, num_components=2,
                  kl_weight=kl_weight, seed=9)
    plain, weighted = NodeDense(3, **kwargs), NodeDense(3, entropy_weight=gamma, **kwargs)
    plain.build((None, 4))
    weighted.build((None, 4))
    params = _random_posterior(plain, 2)
    weighted.set_weights(plain.get_weights())
    x = _inputs((6, 4))
    plain(x, training=True)
    weighted(x, training=True)  # same seed: the same draws
    entropy = sum(_gaussian_entropy(s) for _, s in params.values())
    difference = float(weighted.losses[0]) - float(plain.losses[0])
    assert difference == pytest.approx(-kl_weight * gamma * entropy, rel=1e-4)
    # The tracker logs the term of a read of the losses (each read is a fresh draw).
    weighted.kl_tracker.reset_state()
    term = float(weighted.losses[0])
    assert float(weighted.kl_tracker.result()) == pytest.approx(term)


def test_kl_has_gradients_to_the_node_posterior_and_none_under_no_kl_trace():
    layer = NodeDense(3, noise="both", posterior="flow", flow_length=0, num_components=2,
                      kl_weight=1.0)
    x = _inputs((4, 4))
    layer(x)
    with tf.GradientTape() as tape:
        layer(x, training=True)
        kl = tf.add_n(layer.losses)
    variables = [layer.input_loc, layer.input_rho, layer.output_loc, layer.output_rho]
    for variable, grad in zip(variables, tape.gradient(kl, variables)):
        assert grad is not None and np.any(grad.numpy() != 0), variable.path
    # A layer only ever called for prediction-only graphs has no KL term.
    serving = NodeDense(3, noise="both", posterior="flow", flow_length=0, num_components=2,
                        kl_weight=1.0)
    with _tracing.no_kl_trace():
        serving(x, training=True)
    assert serving.losses == []


# --- flow posteriors --------------------------------------------------------------------------


def _flow_layer(seed=13, **kwargs):
    """NodeDense with output nodes through a 2-step planar flow far from the identity."""
    layer = NodeDense(4, noise="output", posterior="flow", flows="planar", flow_length=2,
                      num_components=2, prior_stddev=0.5, kl_weight=1.0, seed=seed, **kwargs)
    layer.build((None, 4))
    params = _random_posterior(layer, 3)
    rng = np.random.default_rng(4)
    for variable in layer.output_flow.weights:
        variable.assign(rng.normal(0.0, 1.0, variable.shape).astype("float32"))
    return layer, params["output"]


def _reference_flow_terms(layer, mu, sigma, n=20_000, seed=5):
    """Per-draw KL terms (prior at z, and the seed's prior at z0) and log|det J|, in numpy."""
    rng = np.random.default_rng(seed)
    component = np.arange(n) % layer.num_components
    eps = rng.normal(size=(n, mu.shape[1]))
    z0 = mu[component] + sigma[component] * eps
    z, log_det = (_np(t).astype(np.float64) for t in layer.output_flow(z0.astype("float32")))

    def log_prior(v):
        s = layer.prior_stddev
        return (-0.5 * ((v - layer.prior_mean) / s) ** 2 - np.log(s * np.sqrt(2 * np.pi))).sum(1)

    log_q0 = (-0.5 * eps**2 - np.log(sigma[component] * np.sqrt(2 * np.pi))).sum(1)
    return log_q0 - log_det - log_prior(z), log_q0 - log_det - log_prior(z0), log_det


def _mean_and_se(values):
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size)


def test_flow_kl_is_the_monte_carlo_kl_with_the_prior_at_the_flowed_sample():
    layer, (mu, sigma) = _flow_layer()
    correct, seed_formula, _ = _reference_flow_terms(layer, mu, sigma)
    draws = _kl_draws(layer, _inputs((16, 4)), 300)
    mean, se = _mean_and_se(draws)
    for reference, should_match in ((correct, True), (seed_formula, False)):
        ref_mean, ref_se = _mean_and_se(reference)
        gap = abs(mean - ref_mean) / math.hypot(se, ref_se)
        assert bool(gap < 5) is should_match, (mean, ref_mean, gap)
    # kl_divergence() is the same estimator over many draws.
    assert abs(float(layer.kl_divergence(20_000)) - correct.mean()) < 5 * math.sqrt(2) * (
        correct.std() / math.sqrt(20_000))


def test_flow_entropy_is_base_entropy_plus_mean_log_det():
    layer, (mu, sigma) = _flow_layer()
    _, _, log_det = _reference_flow_terms(layer, mu, sigma)
    expected = _gaussian_entropy(sigma) + log_det.mean()
    standard_error = log_det.std() / math.sqrt(log_det.size)
    assert abs(float(layer.entropy(20_000)) - expected) < 5 * math.sqrt(2) * standard_error


def test_flow_entropy_weight_enters_linearly():
    kl_weight = 0.3
    losses = []
    for gamma in (0.0, 0.5, 1.0):
        layer, _ = _flow_layer(seed=14, entropy_weight=gamma)
        layer.kl_weight.assign(kl_weight)
        layer(_inputs((8, 4)), training=True)  # same seed: the same draws
        losses.append(float(layer.losses[0]))
    step = losses[1] - losses[0]
    assert losses[2] - losses[0] == pytest.approx(2 * step, rel=1e-4)
    # -step / (kl_weight * 0.5) is the entropy estimate of those 8 draws: finite.
    assert np.isfinite(step) and step != 0


def test_flow_mean_mode_gives_the_flow_of_each_rows_component_mean():
    layer, (mu, _) = _flow_layer()
    x = _inputs((6, 4), seed=15) + 3.0
    tfp_bnn.set_mean_mode(layer)
    y = _np(layer(x)).astype(np.float64)
    np.testing.assert_array_equal(y, _np(layer(x)))
    z = y / (x.astype(np.float64) @ layer.kernel.numpy() + layer.bias.numpy())
    flowed, _ = layer.output_flow(mu.astype("float32"))
    np.testing.assert_allclose(z, _np(flowed)[np.arange(6) % 2], rtol=1e-4)
    assert float(layer.losses[0]) > 0  # the KL still comes from genuine samples


def test_flow_samples_are_the_flow_of_base_samples():
    layer, (mu, sigma) = _flow_layer()
    samples = layer.node_posterior_samples(20_000, site="output", component=1)
    _, _, log_det = _reference_flow_terms(layer, mu, sigma)
    rng = np.random.default_rng(6)
    z0 = mu[1] + sigma[1] * rng.normal(size=(20_000, 4))
    reference = _np(layer.output_flow(z0.astype("float32"))[0])
    se = np.hypot(samples.std(0), reference.std(0)) / math.sqrt(20_000)
    assert np.all(np.abs(samples.mean(0) - reference.mean(0)) < 5 * se)


# --- modes, fit, scheduler ------------------------------------------------------------------


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_mean_mode_uses_each_rows_component_mean_and_training_still_samples(posterior):
    layer = _square_layer("output", _COMPONENT_MEANS[:2], 0.3, num_components=2,
                          posterior=posterior, flow_length=0)
    x = _inputs((6, 4), seed=10) + 3.0
    tfp_bnn.set_mean_mode(layer)
    first, second = _np(layer(x)), _np(layer(x))
    np.testing.assert_array_equal(first, second)
    z = first / _np(x @ layer.kernel.numpy() + layer.bias.numpy())
    np.testing.assert_allclose(z, (np.arange(6) % 2 + 1.0)[:, None] * np.ones(4), rtol=1e-5)
    assert not np.allclose(_np(layer(x, training=True)), first)
    tfp_bnn.set_mean_mode(layer, False)
    assert not np.allclose(_np(layer(x)), first)


def _regression_data(n=64, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.3).astype("float32")
    return x, y


def _model(head="node", noise="both", **kwargs):
    last = NodeDense(1, seed=2, **kwargs) if head == "node" else keras.layers.Dense(1)
    return keras.Sequential([
        keras.Input((3,)),
        NodeDense(16, activation="tanh", noise=noise, num_components=2, seed=1, **kwargs),
        last,
    ])


def _perturb(model, seed=0):
    """Moves every trainable weight off its initial value (cheaper than a fit)."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        variable.assign(variable.numpy() + rng.normal(0.0, 0.05, variable.shape).astype("float32"))


@pytest.mark.parametrize("jit_compile, posterior", [
    (False, "gaussian"), (True, "flow")])
def test_fit_reduces_the_loss(jit_compile, posterior):
    x, y = _regression_data()
    # The XLA case has one flow: XLA compile time (~5 s per flow on 2 CPUs) grows with them.
    small = dict(head="dense", noise="input") if jit_compile else {}
    model = _model(kl_weight=1.0 / len(x), posterior=posterior, **small)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", jit_compile=jit_compile)
    assert model.jit_compile is jit_compile
    history = model.fit(x, y, epochs=15, batch_size=32, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))
    assert history[-1] < 0.5 * history[0]


@pytest.mark.jax
def test_kl_enters_the_loss_once_per_step_for_a_shared_layer():
    layer = NodeDense(4, noise="both", num_components=2, kl_weight=0.25, seed=3)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, layer(layer(inputs)))  # called twice in one forward pass
    params = _random_posterior(layer, 1)
    expected = 0.25 * sum(_gaussian_kl(mu, s, 1.0, 0.1) for mu, s in params.values())
    x = _inputs((16, 4), seed=1)
    model(x, training=True)
    assert len(model.losses) == 1
    np.testing.assert_allclose(float(model.losses[0]), expected, rtol=1e-5)
    # The compiled train step (learning rate 0: weights unchanged).
    model.compile(keras.optimizers.SGD(0.0), lambda y_true, y_pred: 0.0 * keras.ops.sum(y_pred))
    history = model.fit(x, x, batch_size=8, epochs=1, verbose=0).history["loss"]
    np.testing.assert_allclose(history[-1], expected, rtol=1e-5)


def test_kl_scheduler_sets_the_weight_and_reports_kl_and_data_loss():
    x, y = _regression_data()
    model = _model()
    model.compile(optimizer="adam", loss="mse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scheduler manages the weight: no warning
        history = model.fit(x, y, epochs=2, batch_size=32, verbose=0,
                            callbacks=[KLScheduler(len(x))]).history
    for layer in model.layers:
        assert float(layer.kl_weight.numpy()) == pytest.approx(1.0 / len(x))
    assert "kl" in history and "data_loss" in history
    assert not any(key.endswith("_kl") for key in history)
    for loss, kl, data in zip(history["loss"], history["kl"], history["data_loss"]):
        assert kl > 0 and data == pytest.approx(loss - kl)
    tfp_bnn.set_mean_mode(model)
    np.testing.assert_array_equal(_np(model.predict(x, verbose=0)),
                                  _np(model.predict(x, verbose=0)))


def test_training_without_a_kl_weight_warns_once():
    layer = NodeDense(2)
    x = _inputs((3, 4))
    with pytest.warns(UserWarning, match="kl_weight=1.0"):
        layer(x, training=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x, training=True)


@pytest.mark.jax
def test_seeded_layers_are_reproducible():
    x = _inputs((5, 4))
    a, b = (NodeDense(3, noise="both", num_components=2, kl_weight=1.0, seed=12) for _ in "ab")
    outputs_a = [_np(a(x, training=True)) for _ in range(2)]
    outputs_b = [_np(b(x, training=True)) for _ in range(2)]
    for wa, wb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(wa.numpy(), wb.numpy())
    np.testing.assert_array_equal(outputs_a, outputs_b)
    assert not np.allclose(outputs_a[0], outputs_a[1])


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_mixed_precision_keeps_variables_and_kl_in_float32(posterior):
    layer = NodeDense(3, noise="both", num_components=2, posterior=posterior, kl_weight=1.0,
                      dtype="mixed_float16")
    for training in (True, False):
        y = layer(_inputs((4, 4)), training=training)
        assert y.dtype == "float16" and np.all(np.isfinite(_np(y)))
        assert layer.losses[0].dtype == "float32"
    assert all(v.dtype == "float32" for v in layer.weights)


# --- inspection and saving ----------------------------------------------------------------


def test_node_posterior_samples_match_the_chosen_component():
    layer = _square_layer("both", _COMPONENT_MEANS, 0.1, num_components=3)
    for component in range(3):
        z = layer.node_posterior_samples(4000, site="output", component=component)
        assert z.shape == (4000, 4) and z.dtype == np.float32
        assert np.all(np.abs(z.mean(0) - (component + 1)) < 5 * 0.1 / math.sqrt(4000))
    mixture = layer.node_posterior_samples(9, site="input", component=None)
    np.testing.assert_allclose(mixture.mean(1), np.tile([1.0, 2.0, 3.0], 3), atol=0.6)
    with pytest.raises(ValueError, match="`component`.*got 3"):
        layer.node_posterior_samples(5, component=3)
    with pytest.raises(ValueError, match="`site`.*got 'middle'"):
        layer.node_posterior_samples(5, site="middle")
    with pytest.raises(ValueError, match="`num_samples`.*got 0"):
        layer.node_posterior_samples(0)
    single = NodeDense(2, noise="output")
    single.build((None, 4))
    with pytest.raises(ValueError, match=r"`site`.*\('output',\).*got 'input'"):
        single.node_posterior_samples(5, site="input")


@pytest.mark.parametrize("posterior", [pytest.param("gaussian", marks=pytest.mark.jax), "flow"])
def test_keras_file_round_trip_in_safe_mode(posterior, tmp_path):
    x, _ = _regression_data(16)
    model = _model(kl_weight=0.1, posterior=posterior, flows=["planar", "radial"],
                   entropy_weight=0.2, prior_stddev=0.5)
    _perturb(model)
    tfp_bnn.set_mean_mode(model)
    expected = _np(model(x))
    path = os.path.join(tmp_path, "node.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(_np(loaded(x)), expected)
    assert loaded.layers[0].get_config() == model.layers[0].get_config()
    tfp_bnn.set_mean_mode(loaded, False)
    assert not np.allclose(_np(loaded(x)), expected)


def test_config_round_trip_keeps_every_argument():
    layer = NodeDense(7, activation="relu", use_bias=False, noise="both", posterior="flow",
                      num_components=4, prior_mean=0.5, prior_stddev=0.2, flows="planar",
                      flow_length=0, entropy_weight=0.1, loc_init_stddev=0.0, scale_init=0.01,
                      kl_weight=0.5, seed=3, kernel_regularizer="l2", name="nodes")
    config = layer.get_config()
    clone = NodeDense.from_config(config)
    assert clone.get_config() == config
    assert config["num_components"] == 4 and config["entropy_weight"] == 0.1
    clone.build((None, 2))
    np.testing.assert_allclose(clone.input_loc.numpy(), 1.0)  # loc_init_stddev=0
    np.testing.assert_allclose(_softplus(clone.output_rho.numpy()), 0.01, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(units=0), r"`units` must be a positive int, got 0"),
        (dict(units=2.0), r"`units`.*got 2\.0"),
        (dict(num_components=0), r"`num_components` must be a positive int, got 0"),
        (dict(num_components=1.5), r"`num_components`.*got 1\.5"),
        (dict(num_components=True), r"`num_components`.*got True"),
        (dict(flow_length=-1), r"`flow_length` must be a non-negative int, got -1"),
        (dict(entropy_weight=-0.1), r"`entropy_weight`.*>= 0.*-0\.1"),
        (dict(entropy_weight=float("nan")), r"`entropy_weight`.*nan"),
        (dict(noise="hidden"), r"`noise` must be one of.*'hidden'"),
        (dict(posterior="laplace"), r"`posterior` must be one of.*'laplace'"),
        (dict(prior_stddev=0.0), r"`prior_stddev`.*> 0.*0\.0"),
        (dict(prior_stddev=-1.0), r"`prior_stddev`.*-1\.0"),
        (dict(prior_mean="one"), r"`prior_mean`.*'one'"),
        (dict(scale_init=0.0), r"`scale_init`.*> 0"),
        (dict(loc_init_stddev=-1.0), r"`loc_init_stddev`.*>= 0"),
        (dict(kl_weight=-1.0), r"`kl_weight`.*-1\.0"),
        (dict(seed=-3), r"`seed`.*-3"),
        (dict(flows=3), r"`flows`.*3"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, message):
    kwargs = dict({"units": 2}, **kwargs)
    with pytest.raises(ValueError, match=message):
        NodeDense(**kwargs)


def test_flow_posterior_object_names_the_flow_construction():
    from tfp_bnn.posteriors import FlowPosterior

    layer = NodeDense(3, posterior=FlowPosterior("radial", length=3), kl_weight=1.0, seed=0)
    assert layer.posterior == NodeFlow("radial", 3)
    outputs = layer(np.ones((4, 2), "float32"), training=True)
    assert outputs.shape == (4, 3) and np.all(np.isfinite(outputs))
    assert len(layer.input_flow.step_names) == 3


# --- the posterior vocabulary: objects, and the names configs were saved with ----------------
def test_a_posterior_object_and_its_name_with_flows_build_the_same_layer():
    x = np.linspace(-1.0, 1.0, 8, dtype="float32").reshape(4, 2)
    by_object = NodeDense(3, noise="both", posterior=NodeFlow(["planar", "radial"], 2), seed=4,
                          name="nodes")
    by_name = NodeDense(3, noise="both", posterior="flow", flows=["planar", "radial"],
                        flow_length=2, seed=4, name="nodes")
    assert by_object.get_config() == by_name.get_config()
    np.testing.assert_array_equal(_np(by_object(x, training=True)),
                                  _np(by_name(x, training=True)))
    assert NodeDense(3).posterior == NodeGaussian() == NodeDense(3, posterior="gaussian").posterior


@pytest.mark.parametrize("name, flows, flow_length, expected", [
    ("flow", ["planar", "radial"], 3, NodeFlow(["planar", "radial"], 3)),
    ("flow", "planar", 0, NodeFlow("planar", 0)),
    ("gaussian", "planar", 2, NodeGaussian()),  # flows were always saved, and unused
])
def test_a_config_saved_with_posterior_names_loads(name, flows, flow_length, expected):
    config = NodeDense(3, noise="both", seed=1).get_config()
    # The entries get_config wrote before the posterior objects.
    config.update(posterior=name, flows=flows, flow_length=flow_length)
    layer = NodeDense.from_config(config)
    assert layer.posterior == expected
    assert layer.get_config()["posterior"] == keras.saving.serialize_keras_object(expected)
    assert "flows" not in layer.get_config() and "flow_length" not in layer.get_config()
    assert layer(np.ones((2, 4), "float32"), training=True).shape == (2, 3)


def test_flows_beside_a_posterior_object_are_refused():
    with pytest.raises(ValueError, match=r"`flows` and `flow_length` go with posterior=\"flow\""):
        NodeDense(3, posterior=NodeFlow("radial", 2), flows="planar")

"""FlowPosterior: a Gaussian pushed through a normalizing flow, as a weight posterior."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn import noise
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.flows import NormalizingFlow
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.posteriors import FlowPosterior
from tfp_bnn.testing import run_bayesian_layer_test

STEPS = ["planar", "radial", "sylvester"]
IN, OUT = 3, 2
D = IN * OUT


def _softplus_inverse(x):
    return np.log(np.expm1(x))


def _layer(posterior, sigma=0.4, seed=2, **kwargs):
    """A built Dense layer whose flow is far from the identity and sigma is large."""
    layer = DenseReparameterization(OUT, posterior=posterior, kl_weight=1.0, seed=seed, **kwargs)
    layer.build((None, IN))
    rng = np.random.default_rng(seed)
    loc, rho = layer.kernel_params[:2]
    loc.assign(rng.normal(size=loc.shape).astype("float32"))
    rho.assign(np.full(rho.shape, _softplus_inverse(sigma), "float32"))
    for var in layer.kernel_flow.trainable_variables:
        var.assign(var.numpy() + 0.7 * rng.normal(size=var.shape).astype("float32"))
    return layer


def _float64_flow(flow):
    """A float64 copy of `flow` with the same parameters (for reference values)."""
    config = dict(flow.get_config(), dtype="float64", name="reference")
    copy = NormalizingFlow.from_config(config)
    copy.build((None, D))
    copy.set_weights([w.astype("float64") for w in flow.get_weights()])
    return copy


def _reference_terms(layer, eps):
    """w, log q(w) and log p(w) for base noise eps [N, D], with log|det J| by autodiff."""
    loc = layer.kernel_params[0].numpy().astype("float64").reshape(-1)
    sigma = np.log1p(np.exp(layer.kernel_params[1].numpy().astype("float64"))).reshape(-1)
    z0 = tf.constant(loc + sigma * eps)
    flow = _float64_flow(layer.kernel_flow)
    with tf.GradientTape() as tape:
        tape.watch(z0)
        w, _ = flow(z0, training=False)
    log_det = tf.linalg.slogdet(tape.batch_jacobian(w, z0))[1].numpy()
    log_q0 = (-0.5 * eps**2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)).sum(-1)
    w = w.numpy()
    log_p = (-0.5 * w**2 - 0.5 * np.log(2 * np.pi)).sum(-1)
    return w, log_q0 - log_det, log_p, log_det


def test_standard_battery_default():
    run_bayesian_layer_test(DenseReparameterization,
                            dict(units=3, kl_weight=0.01, posterior=FlowPosterior()), (5, 4))


def test_standard_battery_mixed_flow_with_bayesian_bias():
    posterior = FlowPosterior(STEPS + ["batch_norm"], sylvester_rank=2)
    run_bayesian_layer_test(
        DenseReparameterization,
        dict(units=3, kl_weight=0.01, posterior=posterior, bayesian_bias=True,
             prior=priors.ScaleMixturePrior(0.5, 1.0, 0.1), kl_estimator="mc"),
        (5, 4),
    )


def test_standard_battery_conv2d():
    run_bayesian_layer_test(
        Conv2DReparameterization,
        dict(filters=2, kernel_size=3, kl_weight=0.01,
             posterior=FlowPosterior(["radial", "sylvester"], sylvester_rank=2)),
        (3, 6, 6, 2),
    )


def test_draw_log_prob_is_the_change_of_variables_density():
    layer = _layer(FlowPosterior(STEPS, length=3, sylvester_rank=3))
    seeds = [tf.constant([s, 7]) for s in range(4)]
    draws = [layer.posterior.draw(layer.kernel_params, seed, "float32") for seed in seeds]
    eps = np.stack([noise.normal((D,), "float32", seed).numpy() for seed in seeds])
    w, log_q, _, log_det = _reference_terms(layer, eps.astype("float64"))
    assert np.abs(log_det).min() > 0.5  # the flow matters (tolerance: 1e-3)
    for draw, w_ref, log_q_ref in zip(draws, w, log_q):
        sample = (draw.prepared.mean + draw.perturbation).numpy().reshape(-1)
        np.testing.assert_allclose(sample, w_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(float(draw.log_prob), log_q_ref, rtol=1e-4, atol=1e-3)


def test_kl_estimate_agrees_with_a_direct_monte_carlo():
    layer = _layer(FlowPosterior(STEPS, length=3, sylvester_rank=3), kl_estimator="mc")
    kl = tf.function(layer.kl_divergence)
    estimates = np.array([float(kl()) for _ in range(1000)])
    eps = np.random.default_rng(1).normal(size=(20000, D))
    _, log_q, log_p, log_det = _reference_terms(layer, eps)
    direct = log_q - log_p
    se = np.sqrt(estimates.var() / estimates.size + direct.var() / direct.size)
    # A sign error in the log-determinant would move the estimate by
    # 2 |E[log|det J|]| > 10 standard errors: the test can see it.
    assert 2 * abs(log_det.mean()) > 10 * se
    assert abs(estimates.mean() - direct.mean()) < 5 * se, (estimates.mean(), direct.mean(), se)


def test_length_zero_mc_kl_averages_to_the_closed_form():
    layer = _layer(FlowPosterior(length=0), sigma=0.5, kl_estimator="mc")
    assert layer.kernel_flow.weights == []
    kl = tf.function(layer.kl_divergence)
    estimates = np.array([float(kl()) for _ in range(2000)])
    loc, rho = layer.kernel_params[:2]
    exact = float(priors.NormalPrior().kl_from_normal(tf.convert_to_tensor(loc),
                                                      tf.nn.softplus(rho)))
    se = estimates.std() / np.sqrt(estimates.size)
    assert abs(estimates.mean() - exact) < 5 * se, (estimates.mean(), exact, se)


def test_mean_mode_uses_the_flow_image_of_loc():
    layer = _layer(FlowPosterior(STEPS + ["batch_norm"], length=4, sylvester_rank=3))
    x = np.random.default_rng(2).normal(size=(4, IN)).astype("float32")
    tfp_bnn.set_mean_mode(layer, True)
    out = layer(x).numpy()
    loc = layer.kernel_params[0].numpy().astype("float64").reshape(1, -1)
    image, _ = _float64_flow(layer.kernel_flow)(loc, training=False)
    assert np.abs(image.numpy() - loc).max() > 0.1  # not the identity
    expected = x @ image.numpy().reshape(IN, OUT) + layer.bias.numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_trains_in_fit_round_trips_a_keras_file_and_predicts(tmp_path):
    """Compiled training steps (XLA on JAX) reach every flow parameter, the file keeps
    them, and the loaded layer's mean is the flow layer's own image of loc."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(32, IN)).astype("float32")
    y = (x @ rng.normal(size=(IN, 1))).astype("float32")
    posterior = FlowPosterior(["planar", "sylvester", "batch_norm"], length=3, sylvester_rank=2)
    model = keras.Sequential([keras.Input((IN,)), DenseReparameterization(
        1, posterior=posterior, kl_weight=1 / 32, seed=1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    before = [v.numpy() for v in model.layers[0].kernel_flow.trainable_variables]
    history = model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    after = model.layers[0].kernel_flow.trainable_variables
    assert all(np.any(v.numpy() != b) for v, b in zip(after, before))
    path = str(tmp_path / "flow.keras")
    model.save(path)
    loaded = tfp_bnn.load_model(path)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    layer = loaded.layers[0]
    for var in layer.kernel_flow.trainable_variables:  # far from the identity
        var.assign(var.numpy() + 0.7 * rng.normal(size=var.shape).astype("float32"))
    loc = layer.kernel_params[0].numpy().reshape(1, -1)
    image, _ = layer.kernel_flow(loc)
    assert np.abs(np.asarray(image) - loc).max() > 0.1
    with tfp_bnn.mean_mode(loaded):
        np.testing.assert_allclose(np.asarray(loaded(x)), x @ np.asarray(image).reshape(IN, 1)
                                   + layer.bias.numpy(), rtol=1e-5, atol=1e-5)
    draws = tfp_bnn.predict.sample(loaded, x, num_samples=4)
    assert draws.shape == (4, 32, 1) and np.all(np.isfinite(draws))
    assert draws.std(axis=0).min() > 0


def test_predictive_samples_follow_the_posterior():
    layer = _layer(FlowPosterior(STEPS, length=3, sylvester_rank=3))
    kernels, biases = layer.predictive_samples(4000)
    assert biases is None and tuple(kernels.shape) == (4000, IN, OUT)
    kernels = kernels.numpy().reshape(4000, D)
    w, _, _, _ = _reference_terms(layer, np.random.default_rng(3).normal(size=(4000, D)))
    for stat in (np.mean, np.std):
        a, b = stat(kernels, 0), stat(w, 0)
        spread = np.std(w, 0)
        se = spread * np.sqrt(2.0 / 4000) * (1.0 if stat is np.mean else 0.8)
        assert np.all(np.abs(a - b) < 5 * se), (stat.__name__, a, b)


def test_predict_sample_on_a_model():
    layer = _layer(FlowPosterior(STEPS, length=3, sylvester_rank=3))
    model = keras.Sequential([keras.Input((IN,)), layer])
    x = np.random.default_rng(4).normal(size=(7, IN)).astype("float32")
    draws = tfp_bnn.predict.sample(model, x, num_samples=16)
    assert draws.shape == (16, 7, OUT)
    assert np.all(np.isfinite(draws)) and draws.std(axis=0).min() > 1e-3
    with tfp_bnn.mean_mode(model):
        mean_draws = tfp_bnn.predict.sample(model, x, num_samples=16)
        expected = model(x).numpy()
    np.testing.assert_allclose(mean_draws, np.broadcast_to(expected, mean_draws.shape),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls, kwargs", [
    (DenseFlipout, dict(units=2)),
    (DenseLocalReparameterization, dict(units=2)),
    (Conv2DFlipout, dict(filters=2, kernel_size=3)),
], ids=["DenseFlipout", "DenseLocalReparameterization", "Conv2DFlipout"])
def test_location_scale_layers_reject_it(cls, kwargs):
    with pytest.raises(ValueError, match="location-scale"):
        cls(posterior=FlowPosterior(), **kwargs)


def test_analytic_kl_is_refused():
    layer = DenseReparameterization(2, posterior="flow", kl_estimator="analytic")
    with pytest.raises(ValueError, match="`kl_estimator`='analytic'"):
        layer(np.ones((1, 3), "float32"))


def test_auto_estimator_uses_the_monte_carlo_kl():
    # N(0, 1) has a closed-form KL to a Gaussian, but not to a flow posterior.
    layer = _layer(FlowPosterior(STEPS, length=3, sylvester_rank=3))
    assert layer.kl_estimator == "auto"
    layer(np.ones((2, IN), "float32"), training=True)
    assert len(layer.losses) == 1 and np.isfinite(float(layer.losses[0]))
    assert np.isfinite(float(layer.kl_divergence()))


def test_serialization_and_lookup():
    post = FlowPosterior(["planar", "radial"], length=3, rho_init=-4.0, rho_init_stddev=0.0,
                         sylvester_rank=2)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(post))
    assert restored == post and hash(restored) == hash(post)
    assert isinstance(posteriors.get("flow"), FlowPosterior)
    assert posteriors.FlowPosterior is FlowPosterior


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(flows="spline"), "flows"),
        (dict(flows=7), "flows"),
        (dict(length=-1), "length"),
        (dict(length=2.0), "length"),
        (dict(rho_init=float("nan")), "rho_init"),
        (dict(rho_init_stddev=-1.0), "rho_init_stddev"),
        (dict(sylvester_rank=0), "sylvester_rank"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        FlowPosterior(**kwargs)

"""Tests of zoo.models.dvi: the sampling-free MLP of Wu et al. (2019) against Monte Carlo."""

import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
import zoo
from tfp_bnn.callbacks import KLScheduler
from zoo.models import dvi
from zoo.run import scoring

N = 64
# A z-score of 4.5 fails by chance with probability 7e-6 per comparison (normal tails).
Z = 4.5


def _data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (np.sin(x[:, 0]) + 0.3 * np.abs(x[:, 1]) * rng.normal(size=n)).astype("float32")
    return x, y


@pytest.fixture(scope="module")
def trained():
    """A model, its loss history over 8 epochs of 64 rows, and the data."""
    x, y = _data()
    model = dvi.dvi_mlp((8,), num_train=N, hidden_units=(16,), learning_rate=1e-2, seed=1)
    history = model.fit(x, y, epochs=8, batch_size=32, verbose=0, callbacks=[KLScheduler(N)])
    return model, history.history["loss"], x, y


def _widen(model, scale):
    """Sets every posterior standard deviation to `scale` (far from the 0.05 start)."""
    rho = math.log(math.expm1(scale))
    for layer in tfp_bnn.bayesian_layers(model):
        for weight in layer.weights:
            if weight.name.endswith("_rho"):
                weight.assign(tf.fill(weight.shape, rho))


def _monte_carlo(model, x, samples, seed=0):
    """(m, l) per weight sample [S, B, D] of the plain network with sampled weights."""
    rng = np.random.default_rng(seed)
    h = np.broadcast_to(x.reshape(len(x), -1), (samples,) + x.reshape(len(x), -1).shape)

    def draw(layer):
        loc_k, var_k, loc_b, var_b = [t.numpy().astype(np.float64)
                                      for t in layer.posterior_moments()]
        kernel = loc_k + np.sqrt(var_k) * rng.standard_normal((samples,) + loc_k.shape)
        bias = loc_b + np.sqrt(var_b) * rng.standard_normal((samples, 1) + loc_b.shape)
        return kernel, bias
    for layer in model.hidden:
        kernel, bias = draw(layer)
        h = np.maximum(np.einsum("sbi,sio->sbo", h, kernel) + bias, 0.0)
    kernel, bias = draw(model.head)
    out = np.einsum("sbi,sio->sbo", h, kernel) + bias
    d = model.targets
    return out[..., :d], out[..., d:]


def _assert_matches(model, x, samples, seed=0, slack=0.0):
    """Propagated mu_m, mu_l, S_mm, S_ll, S_ml vs Monte Carlo, per example.

    The bound is Z standard errors estimated from the samples themselves: sd / sqrt(S) for
    a mean, sqrt(Var[(a - Ea)(b - Eb)] / S) for a (co)variance (the delta method; it holds
    for the non-Gaussian outputs too), plus `slack` times the field's scale for an
    approximation: the sd for a mean, the variance, sqrt(S_mm S_ll) for the covariance.
    Returns the largest error of each field in units of its scale.
    """
    m, l = _monte_carlo(model, x, samples, seed)
    got = dict(zip(dvi.MOMENT_FIELDS, np.split(model.output_moments(x).numpy(), 5, axis=-1)))
    cm, cl = m - m.mean(0), l - l.mean(0)
    var_m, var_l = (cm * cm).mean(0), (cl * cl).mean(0)
    checks = {"mean_m": (m, np.sqrt(var_m)), "mean_l": (l, np.sqrt(var_l)),
              "var_m": (cm * cm, var_m), "var_l": (cl * cl, var_l),
              "cov_ml": (cm * cl, np.sqrt(var_m * var_l))}
    worst = {}
    for field, (terms, scale) in checks.items():
        stderr = terms.std(0) / math.sqrt(samples)
        error = np.abs(got[field] - terms.mean(0))
        assert np.all(error <= Z * stderr + slack * scale + 1e-7), (
            field, error.max(), stderr.max())
        worst[field] = float(np.max(error / scale))
    return worst


def test_one_hidden_layer_moments_are_exact_against_monte_carlo(trained):
    # One hidden layer of a constant input: its pre-activations are exactly Gaussian and
    # independent, so rectified-Gaussian moments, dense moments and Cov[m, l] are exact and
    # only Monte Carlo error remains (no slack).
    model = dvi.DVIRegressor(hidden_units=(12,), seed=3)
    model.build((None, 8))
    _widen(model, 0.3)
    x = _data(6, seed=2)[0]
    _assert_matches(model, x, samples=40_000)
    # The briefly trained model, at its own posterior.
    _assert_matches(trained[0], x, samples=40_000, seed=1)


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_two_hidden_layers_within_the_gaussian_approximation(mode):
    # The second layer's inputs are rectified, so its units are not Gaussian and (in
    # diagonal mode) their covariances are dropped. Measured against 200,000 samples at
    # sd 0.3 over model seeds 4-8, the largest error in units of the field's scale was
    # 0.146 (diagonal) and 0.127 (full); mean over seeds of the largest var_m / var_l /
    # cov_ml error 0.062 / 0.094 / 0.057 (diagonal) and 0.036 / 0.062 / 0.032 (full).
    model = dvi.DVIRegressor(hidden_units=(12, 12), mode=mode, seed=4)
    model.build((None, 8))
    _widen(model, 0.3)
    worst = _assert_matches(model, _data(6, seed=3)[0], samples=40_000, slack=0.2)
    assert max(worst.values()) > 0.02  # the approximation is visible: the check can fail


def test_full_mode_equals_diagonal_with_one_hidden_layer():
    x = _data(5)[0]
    diagonal, full = (dvi.DVIRegressor(hidden_units=(10,), mode=mode, seed=2)
                      for mode in ("diagonal", "full"))
    for model in (diagonal, full):
        model.build((None, 8))
        _widen(model, 0.2)
    np.testing.assert_allclose(full.output_moments(x).numpy(),
                               diagonal.output_moments(x).numpy(), rtol=1e-5, atol=1e-7)


def test_expected_nll_matches_monte_carlo_of_jointly_gaussian_m_and_l():
    rng = np.random.default_rng(0)
    samples = 400_000
    mean = np.array([0.3, -0.4])
    cov = np.array([[0.5, -0.2], [-0.2, 0.25]])
    draws = rng.multivariate_normal(mean, cov, size=samples)
    m, l = draws[:, 0], draws[:, 1]
    for y in (-1.0, 0.2, 1.5):
        nll = 0.5 * (math.log(2 * math.pi) + l + (y - m) ** 2 * np.exp(-l))
        stderr = nll.std() / math.sqrt(samples)  # the MC mean's standard error
        args = (y, mean[0], mean[1], cov[0, 0], cov[1, 1])
        got = float(dvi.expected_gaussian_nll(*args, cov[0, 1]))
        assert abs(got - nll.mean()) <= Z * stderr, (y, got, nll.mean(), stderr)
        # The sign of S_ml matters beyond the Monte Carlo error.
        flipped = float(dvi.expected_gaussian_nll(*args, -cov[0, 1]))
        assert abs(flipped - nll.mean()) > 10 * stderr
    # The loss reads the [mu_m, mu_l, S_mm, S_ll, S_ml] layout, averaged over the batch.
    pred = np.array([[0.3, -0.4, 0.5, 0.25, -0.2], [0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    expected = np.mean([float(dvi.expected_gaussian_nll(1.0, *row)) for row in pred])
    np.testing.assert_allclose(float(dvi.DVIGaussianNLL()(np.ones((2, 1)), pred)), expected,
                               rtol=1e-6)
    # Far out (mu_l = -200) the value is finite although exp(200) overflows float32.
    np.testing.assert_allclose(float(dvi.expected_gaussian_nll(1e-30, 0.0, -200.0, 0.0, 0.0,
                                                               0.0)),
                               0.5 * (math.log(2 * math.pi) - 200.0 + 1e-60 * math.exp(200)),
                               rtol=1e-6)


def test_fit_lowers_a_finite_loss_and_evaluate_is_the_expected_nll_plus_kl(trained):
    model, losses, x, y = trained
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    fields = np.split(model.output_moments(x).numpy(), 5, axis=-1)
    data = float(np.mean(dvi.expected_gaussian_nll(y[:, None], *fields)))
    kl = sum(float(layer.kl_divergence()) for layer in tfp_bnn.bayesian_layers(model)) / N
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=N, verbose=0), data + kl,
                               rtol=1e-5)


def test_output_is_the_moment_matched_predictive(trained):
    model, _, x, _ = trained
    mean_m, mean_l, var_m, var_l, _ = np.split(model.output_moments(x).numpy(), 5, axis=-1)
    out = model(x).numpy()
    np.testing.assert_allclose(out[:, :1], mean_m, rtol=1e-6)
    np.testing.assert_allclose(np.exp(out[:, 1:]), var_m + np.exp(mean_l + var_l / 2),
                               rtol=1e-5)
    # zoo.run.scoring takes one deterministic pass and reads [mean, log variance].
    prediction, _ = scoring.predict(model, x, num_samples=50)
    np.testing.assert_allclose(prediction.mean, out[:, :1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(prediction.total_variance, np.exp(out[:, 1:]), rtol=1e-5)


def test_round_trips_through_a_keras_file(trained, tmp_path):
    model, _, x, _ = trained
    path = os.path.join(tmp_path, "dvi.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert isinstance(loaded, dvi.DVIRegressor) and isinstance(loaded.loss, dvi.DVIGaussianNLL)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert loaded.get_config() == model.get_config()


def test_registry_builds_it_and_the_homoscedastic_variant_learns_one_noise():
    model = zoo.build_model("dvi_mlp", (8,), num_train=100)
    assert zoo.get_spec("dvi_mlp").sampling_free and scoring.sampling_free(model)
    assert model.hidden_units == (50,) and model.heteroscedastic
    assert [float(layer.kl_weight.numpy()) for layer in tfp_bnn.bayesian_layers(model)] == [
        pytest.approx(0.01)] * 2
    plain = dvi.dvi_mlp((2, 4), num_train=100, heteroscedastic=False)
    out = plain(_data(5)[0].reshape(5, 2, 4)).numpy()
    assert out.shape == (5, 2) and plain.head.units == 1
    # A learned noise shared by every input: s varies only through the weight variance.
    fields = np.split(plain.output_moments(_data(5)[0]).numpy(), 5, axis=-1)
    np.testing.assert_array_equal(fields[1], 0.0)
    np.testing.assert_array_equal(fields[3], 0.0)
    np.testing.assert_array_equal(fields[4], 0.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "banana"}, "mode"),
    ({"hidden_units": (16, 0)}, "hidden_units"),
    ({"heteroscedastic": "yes"}, "heteroscedastic"),
    ({"task": "classification", "num_classes": 3}, "regression"),
    ({"mode": "full", "hidden_units": (4096,)}, "mode='full'"),
    ({"learning_rate": -1.0}, "learning_rate"),
    ({"num_train": None}, "num_train"),
])
def test_bad_arguments_are_named_in_one_line(kwargs, match):
    kwargs = {"num_train": 100, **kwargs}
    with pytest.raises(ValueError, match=match) as info:
        dvi.dvi_mlp((8,), **kwargs)
    assert "\n" not in str(info.value)


def test_loss_refuses_a_prediction_without_the_five_moments():
    with pytest.raises(ValueError, match="5 \\* D moments"):
        dvi.DVIGaussianNLL()(np.zeros((3, 1)), np.zeros((3, 2), np.float32))

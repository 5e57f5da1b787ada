"""`tfp_bnn.layers.RandomFeatureGaussianProcess` and `mean_field_logits` (SNGP).

Against Bayesian linear regression on the layer's features (exact, float64), the
exact RBF GP (tolerance from D), distance awareness, Monte Carlo inside
`tfp_bnn.predict`, the classification weights, the momentum update, dtypes, a .keras
round trip of an SNGP model and bad arguments. The tests marked `jax` (float32: JAX runs
without x64) also prove the JAX port: Keras' layer test, a short fit that updates the
precision matrix and the power-iteration vector, mean-field logits against NumPy and
the .keras round trip. Keras 3's `run_layer_test` runs on this
layer with the others in tests/integration/test_keras_conformance.py; here it runs
again with `return_variance=True` and the optional sublayers.
"""

import functools
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import testing

import tfp_bnn
from tfp_bnn import _memory
from tfp_bnn.callbacks import ResetCovariance
from tfp_bnn.layers import RandomFeatureGaussianProcess
from tfp_bnn.layers import SpectralNormalization
from tfp_bnn.layers import mean_field_logits

NOISE = 0.1  # sigma^2 = ridge_penalty: the layer is then exact Bayesian linear regression


def _data(n=8):
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.0, 2.0, (n, 1))
    return x, np.sin(2.0 * x[:, 0]) + math.sqrt(NOISE) * rng.normal(size=n)


X, Y = _data()
GRID = np.linspace(-8.0, 8.0, 33)[:, None]  # the data lie in [-2, 2]


def _rbf(a, b):
    return np.exp(-0.5 * np.square(a[:, None, :] - b[None]).sum(-1))


@functools.cache
def fitted(num_inducing, seed=0, dtype="float64"):
    """One pass over (X, Y) with frozen features, beta set to the posterior mean."""
    layer = RandomFeatureGaussianProcess(1, num_inducing=num_inducing, ridge_penalty=NOISE,
                                         seed=seed, dtype=dtype)
    layer(X, training=True)  # P = ridge I + Phi^T Phi
    phi = layer.random_features(X).numpy().astype(np.float64)
    precision = NOISE * np.eye(num_inducing) + phi.T @ phi
    beta = np.linalg.solve(precision, phi.T @ Y)
    layer.kernel.assign(beta[:, None])
    return layer, phi, precision, beta


def _exact_gp(points):
    """Exact GP posterior variance v and weights a = (K + sigma^2 I)^-1 k* per point."""
    weights = np.linalg.solve(_rbf(X, X) + NOISE * np.eye(len(X)), _rbf(X, points)).T
    return 1.0 - np.einsum("ij,ij->i", weights, _rbf(points, X)), weights


def test_one_pass_is_bayesian_linear_regression_on_the_features():
    layer, phi, precision, beta = fitted(256)
    phi_grid = layer.random_features(GRID).numpy()
    covariance = NOISE * np.linalg.inv(precision)
    means, variances = (v.numpy() for v in layer(GRID, return_variance=True))
    np.testing.assert_allclose(layer.precision.numpy(), precision, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer.covariance().numpy(), covariance, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(means[:, 0], phi_grid @ beta, rtol=1e-10, atol=1e-12)
    expected = np.einsum("ij,jk,ik->i", phi_grid, covariance, phi_grid)
    np.testing.assert_allclose(variances[:, 0], expected, rtol=1e-9)


def _first_order_sd(points, weights, num_inducing, draws=100_000):
    """sd of the random-feature GP variance around the exact one, to first order in 1/D.

    phi(x)^T phi(y) is a mean of D iid terms f_j(x) f_j(y), f_j = sqrt(2) cos(w_j x + b_j),
    of expectation k(x, y). The feature model is exact BLR, i.e. the GP posterior for that
    kernel, so to first order its variance at x* differs from the exact v(x*) by the
    centred mean of the D terms g_j = (f_j(x*) - a^T f_j(X))^2, a = (K + sigma^2 I)^-1 k*:
    sd = sd(g) / sqrt(D), O(1/sqrt(D)). sd(g) by quadrature over (w, b), its own relative
    error ~ 1/sqrt(draws).
    """
    rng = np.random.default_rng(123)
    w, b = rng.normal(size=draws), rng.uniform(0.0, 2.0 * math.pi, draws)

    def features(x):
        return math.sqrt(2.0) * np.cos(np.outer(x[:, 0], w) + b)

    return np.square(features(points) - weights @ features(X)).std(axis=1) / math.sqrt(
        num_inducing)


def test_variance_approaches_the_exact_rbf_gp_as_num_inducing_grows():
    # Within 4 first-order sd at every point (the largest of the 33 measured 2.2 sd at
    # both sizes); a length scale of 1.2 instead of 1 is 7 sd off at D = 1024.
    exact, weights = _exact_gp(GRID)
    errors = {}
    for size in (128, 1024):
        layer = fitted(size, seed=1)[0]
        variance = layer(GRID, return_variance=True)[1].numpy()[:, 0]
        sd = _first_order_sd(GRID, weights, size)
        errors[size] = np.abs(variance - exact)
        assert np.all(errors[size] <= 4.0 * sd), (size, np.max(errors[size] / sd))
    assert errors[1024].mean() < errors[128].mean()


def test_distance_awareness_variance_small_at_the_data_and_back_to_the_prior_far_away():
    size = 1024
    layer, phi = fitted(size, seed=1)[:2]  # shared with the test above
    near = layer(X, return_variance=True)[1].numpy()[:, 0]
    far_points = np.array([[-8.0], [-6.5], [6.5], [8.0]])  # >= 4.5 length scales away
    far = layer(far_points, return_variance=True)[1].numpy()[:, 0]
    # At a training point the exact variance is below the one-point posterior's
    # sigma^2 / (1 + sigma^2); the feature model adds at most 4 sd (test above).
    exact_near, weights = _exact_gp(X)
    assert np.all(exact_near <= NOISE / (1 + NOISE))
    assert np.all(near <= NOISE / (1 + NOISE) + 4.0 * _first_order_sd(X, weights, size))
    # Far away k* ~ 0, the exact variance is the prior's k(x, x) = 1: Sigma = ridge P^-1 and
    # P = ridge I on the directions the data never touched, so the ridge cancels. The
    # features give phi*^T phi* - c: phi*^T phi* = mean of 1 + cos(2 u_j) (sd sqrt(0.5 / D))
    # and c, the part of phi* the data explain, of mean about d_eff / D with
    # d_eff = tr(Phi^T Phi P^-1) the data's effective dimension (phi* isotropic to them).
    eigen = np.linalg.eigvalsh(phi @ phi.T)  # the nonzero eigenvalues of Phi^T Phi
    d_eff = np.sum(eigen / (eigen + NOISE))
    assert np.all(np.abs(far - 1.0) <= 4.0 * math.sqrt(0.5 / size) + 4.0 * d_eff / size)
    assert far.min() > 5 * near.max()


def test_monte_carlo_inside_predict_and_mean_mode():
    layer, _, _, beta = fitted(256)
    model = keras.Sequential([keras.Input((1,), dtype="float64"), layer])
    phi = layer.random_features(GRID).numpy()
    variance = layer(GRID, return_variance=True)[1].numpy()[:, 0]
    samples = 2000
    prediction = tfp_bnn.predict.regression(model, GRID, num_samples=samples, output="mean")
    # T independent Gaussian draws: the sample variance's relative sd is sqrt(2 / T),
    # the sample mean's sd sqrt(v / T); 4 sd over the 33 points.
    np.testing.assert_allclose(prediction.epistemic_variance[:, 0], variance,
                               rtol=4.0 * math.sqrt(2.0 / samples))
    assert np.all(np.abs(prediction.mean[:, 0] - phi @ beta)
                  <= 4.0 * np.sqrt(variance / samples))
    with tfp_bnn.mean_mode(model):
        exact = tfp_bnn.predict.regression(model, GRID, num_samples=3, output="mean")
    np.testing.assert_allclose(exact.sample_means[:, :, 0], np.tile(phi @ beta, (3, 1)),
                               rtol=1e-12, atol=1e-12)
    assert np.all(np.ptp(exact.sample_means, axis=0) == 0.0)  # the same beta_MAP each time


@pytest.mark.parametrize("units", [1, 3])
def test_classification_weights_each_example_by_p_times_one_minus_p(units):
    layer = RandomFeatureGaussianProcess(units, num_inducing=16, likelihood="classification",
                                         ridge_penalty=2.0, seed=0, dtype="float64")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 3))
    layer(x)
    layer.kernel.assign(3.0 * rng.normal(size=(16, units)))  # logits far from 0
    phi = layer.random_features(x).numpy()
    logits = layer(x, training=True).numpy()
    if units == 1:
        p = 1.0 / (1.0 + np.exp(-logits[:, 0]))
    else:
        p = np.max(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), axis=1)
    expected = 2.0 * np.eye(16) + phi.T @ ((p * (1 - p))[:, None] * phi)
    np.testing.assert_allclose(layer.precision.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_momentum_moves_the_data_term_and_keeps_the_ridge():
    momentum, ridge = 0.9, 0.5
    layer = RandomFeatureGaussianProcess(2, num_inducing=8, momentum=momentum,
                                         ridge_penalty=ridge, seed=0, dtype="float64")
    rng = np.random.default_rng(2)
    first, second = rng.normal(size=(5, 2)), rng.normal(size=(7, 2))
    expected = ridge * np.eye(8)
    for batch in (first, second):
        layer(batch, training=True)
        phi = layer.random_features(batch).numpy()
        expected = (ridge * np.eye(8) + momentum * (expected - ridge * np.eye(8))
                    + (1 - momentum) * phi.T @ phi / len(batch))
        np.testing.assert_allclose(layer.precision.numpy(), expected, rtol=1e-12)
    layer(first)  # inference leaves P alone
    np.testing.assert_allclose(layer.precision.numpy(), expected, rtol=1e-12)
    layer.reset_covariance()
    np.testing.assert_array_equal(layer.precision.numpy(), ridge * np.eye(8))


def test_mean_field_logits_against_its_formula():
    rng = np.random.default_rng(3)
    logits, variance = rng.normal(size=(4, 3)), rng.uniform(0, 5, size=4)
    expected = logits / np.sqrt(1.0 + math.pi / 8 * variance)[:, None]
    np.testing.assert_allclose(mean_field_logits(logits, variance), expected, rtol=1e-12)
    per_class = rng.uniform(0, 5, size=(4, 3))
    np.testing.assert_allclose(mean_field_logits(logits, per_class, mean_field_factor=2.0),
                               logits / np.sqrt(1.0 + 2.0 * per_class), rtol=1e-12)
    np.testing.assert_array_equal(mean_field_logits(logits, variance, 0.0), logits)


def test_return_variance_in_a_functional_model_and_under_mixed_float16():
    inputs = keras.Input((2,))
    logits, variance = RandomFeatureGaussianProcess(3, num_inducing=32, seed=0)(
        inputs, return_variance=True)
    model = keras.Model(inputs, [logits, variance])
    x = np.random.default_rng(4).normal(size=(5, 2)).astype("float32")
    reference = model.predict(x, verbose=0)
    assert [r.shape for r in reference] == [(5, 3), (5, 3)]
    mixed = RandomFeatureGaussianProcess(3, num_inducing=32, seed=0, dtype="mixed_float16")
    values = mixed(x, return_variance=True)
    assert [v.dtype for v in values] == ["float16", "float16"]
    assert mixed.precision.dtype == "float32" and mixed.random_kernel.dtype == "float32"
    # Same seed, same weights: float32 arithmetic inside, float16 (rel. 2^-11) outputs.
    for ours, theirs in zip(values, reference):
        np.testing.assert_allclose(np.float32(ours), theirs, rtol=2e-3, atol=1e-3)


@pytest.mark.jax
def test_keras_run_layer_test_with_variance_bias_and_normalisation():
    # Keras's training step feeds a single target, so it runs without return_variance in
    # tests/integration/test_keras_conformance.py.
    testing.TestCase().run_layer_test(
        RandomFeatureGaussianProcess,
        {"units": 3, "num_inducing": 8, "normalize_input": True, "use_bias": True, "seed": 0},
        input_shape=(2, 4), call_kwargs={"return_variance": True},
        expected_output_shape=((2, 3), (2, 3)), expected_num_trainable_weights=4,
        expected_num_non_trainable_weights=4, expected_num_seed_generators=1,
        expected_num_losses=1, supports_masking=False, run_training_check=False)


@pytest.mark.parametrize("kwargs, name", [
    ({"units": 0}, "units"), ({"num_inducing": 1.5}, "num_inducing"),
    ({"lengthscale": 0.0}, "lengthscale"), ({"normalize_input": "yes"}, "normalize_input"),
    ({"likelihood": "poisson"}, "likelihood"), ({"ridge_penalty": -1.0}, "ridge_penalty"),
    ({"momentum": 1.0}, "momentum"), ({"l2_regularization": float("nan")}, "l2_regularization"),
    ({"use_bias": 1}, "use_bias"), ({"seed": -1}, "seed"),
])
def test_bad_arguments_raise_one_line_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`") as error:
        RandomFeatureGaussianProcess(**{"units": 2, **kwargs})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"num_inducing": 10**6}, r"num_inducing=1,000,000 and units=2 would need 7\.45e\+03 GiB"),
    ({"units": 10**12}, r"num_inducing=1,024 and units=1,000,000,000,000 would need"),
])
def test_sizes_whose_matrices_cannot_fit_are_refused_at_construction(kwargs, pattern):
    with pytest.raises(ValueError, match=f"^A RandomFeatureGaussianProcess with {pattern}.*"
                                         "over half of this machine's memory .*; use a smaller "
                                         r"`num_inducing` or `units`\.$"):
        RandomFeatureGaussianProcess(**{"units": 2, **kwargs})


def test_input_features_enter_the_memory_check_at_build(monkeypatch):
    # 1,024 * (2 * 1,024 + 2) float32 = 8.4 MB fit in half of 18 MiB (9.4 MB); with
    # the 1,024 x 1,024 random projection of 1,024 input features (12.6 MB) they do not.
    monkeypatch.setattr(_memory, "memory_bytes", lambda: 18 * 2**20)
    layer = RandomFeatureGaussianProcess(2, num_inducing=1024)
    with pytest.raises(ValueError, match=r"num_inducing=1,024 and units=2 on 1,024 input "
                                         r"features would need"):
        layer.build((None, 1024))
    assert not layer.built and not hasattr(layer, "precision")


def test_bad_inputs_and_mean_field_factor_raise():
    with pytest.raises(ValueError, match="inputs \\[batch, features\\]"):
        RandomFeatureGaussianProcess(2)(np.zeros((2, 3, 4), "float32"))
    with pytest.raises(ValueError, match="`mean_field_factor`"):
        mean_field_logits(np.zeros((2, 3)), np.ones(2), mean_field_factor=-1.0)
    assert tf.reduce_all(tf.math.is_finite(mean_field_logits(np.zeros((2, 3)), np.ones(2))))


# -- On both backends (marked `jax`): float32, as JAX runs without x64 -----------------

JAX_RIDGE = 0.5


def _numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


@pytest.fixture(scope="module")
def frozen_sngp():
    """SN residual block + GP fitted 2 epochs with ResetCovariance, hidden layer frozen.

    The Dense kernel is inside the norm bound and not trainable, so spectral
    normalisation leaves it as it is and the GP's features stay those of the
    final model: P must be ridge I + Phi^T Phi of one pass over the data.
    """
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (32, 2)).astype("float32")
    y = (x[:, :1] * x[:, 1:]).astype("float32")
    dense = keras.layers.Dense(2, activation="relu", trainable=False,
                               kernel_initializer=keras.initializers.Constant(
                                   [[0.6, 0.2], [-0.1, 0.5]]))
    inputs = keras.Input((2,))
    hidden = SpectralNormalization(dense, norm_multiplier=0.9, power_iterations=3)(inputs)
    gp = RandomFeatureGaussianProcess(1, num_inducing=16, ridge_penalty=JAX_RIDGE, seed=0)
    model = keras.Model(inputs, gp(keras.layers.Add()([inputs, hidden])))
    model.compile("adam", "mse")
    vector_u = _numpy(model.layers[1].vector_u)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[ResetCovariance()])
    hidden_values = x + np.maximum(x @ _numpy(dense.kernel) + _numpy(dense.bias), 0.0)
    return model, gp, x, hidden_values, vector_u


@pytest.mark.jax
def test_fit_updates_the_precision_with_the_last_epoch_and_the_power_iteration_vector(
        frozen_sngp):
    model, gp, _, hidden, initial_u = frozen_sngp
    phi = _numpy(gp.random_features(hidden)).astype(np.float64)
    # One epoch's sum of 32 outer products in float32 (two epochs without the reset).
    np.testing.assert_allclose(_numpy(gp.precision), JAX_RIDGE * np.eye(16) + phi.T @ phi,
                               rtol=1e-5, atol=1e-5)
    # The vector u of the power iteration left the jitted steps: 4 steps of 3
    # iterations from a random start align it with the kernel's top right singular
    # vector (sigma_2 / sigma_1 = 0.6 here: 0.6^24 ~ 5e-6).
    u = _numpy(model.layers[1].vector_u)[0]
    top = np.linalg.svd(_numpy(model.layers[1].layer.kernel))[2][0]
    assert not np.allclose(u, initial_u[0])
    np.testing.assert_allclose(abs(u @ top), 1.0, rtol=1e-4)


@pytest.mark.jax
def test_mean_field_logits_of_the_fitted_gp_against_numpy(frozen_sngp):
    _, gp, _, hidden, _ = frozen_sngp

    def predictive(points):
        logits, variance = gp(points, return_variance=True)
        return logits, variance, mean_field_logits(logits, variance), gp.random_features(points)

    if keras.backend.backend() == "jax":  # one compilation instead of one per eager op
        import jax  # noqa: PLC0415

        predictive = jax.jit(predictive)
    logits, variance, adjusted, phi = (_numpy(v) for v in predictive(hidden[:8]))
    phi = phi.astype(np.float64)
    precision = _numpy(gp.precision).astype(np.float64)
    beta = _numpy(gp.kernel).astype(np.float64)
    expected_variance = JAX_RIDGE * np.einsum("ij,ji->i", phi, np.linalg.solve(precision, phi.T))
    np.testing.assert_allclose(logits, phi @ beta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variance[:, 0], expected_variance, rtol=1e-4)
    expected = (phi @ beta) / np.sqrt(1.0 + math.pi / 8 * expected_variance)[:, None]
    np.testing.assert_allclose(adjusted, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.jax
def test_fitted_sngp_keras_file_round_trip(frozen_sngp, tmp_path):
    model, gp, x, _, _ = frozen_sngp
    path = os.fspath(tmp_path / "sngp.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], RandomFeatureGaussianProcess)
    assert isinstance(loaded.layers[1], SpectralNormalization)
    assert loaded.layers[1].norm_multiplier == 0.9
    for ours, theirs in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(_numpy(ours), _numpy(theirs))
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))
    features = gp.random_features(x)
    np.testing.assert_array_equal(_numpy(gp.predictive_variance(features)),
                                  _numpy(loaded.layers[-1].predictive_variance(features)))

"""`tfp_bnn.layers.VariationalGaussianProcess`: TFP parity, the exact GP, a fit, saving.

Keras 3's `run_layer_test` runs on this layer with the others in
tests/integration/test_keras_conformance.py (config round trip, symbolic and
eager calls, weight counts, a training step, mixed precision, float64).
"""

import math

import pytest

# First: `tfp.layers` is built on tf_keras (see tests/integration/test_tfp_parity_dense.py).
tf_keras = pytest.importorskip("tf_keras")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from tfp_bnn.distributions import distribution_of  # noqa: E402
from tfp_bnn.kernels import ExponentiatedQuadraticProvider  # noqa: E402
from tfp_bnn.layers import VariationalGaussianProcess  # noqa: E402

tfd = tfp.distributions


class _PackedKernelProvider(tf_keras.layers.Layer):
    """TFP's kernel-provider contract: a tf_keras layer whose `kernel` property reads
    its variables; here one vector (softplus amplitude, softplus length scale)."""

    def __init__(self, raw, **kwargs):
        super().__init__(dtype="float64", **kwargs)
        self.raw = self.add_weight(name="raw", shape=(2,), dtype="float64",
                                   initializer=tf_keras.initializers.Constant(raw))

    @property
    def kernel(self):
        positive = tf.nn.softplus(self.raw)
        return tfp.math.psd_kernels.ExponentiatedQuadratic(positive[0], positive[1])


def _short_name(variable):
    return variable.name.split("/")[-1].split(":")[0]


def test_same_predictive_and_kl_as_tfp_layers():
    # Two output functions over 2-D inputs, 3 inducing points, random parameters.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 2))
    y = rng.normal(size=(6, 2))
    raw = np.array([0.4, -0.2])
    params = {
        "mean": np.float64(0.3),
        "observation_noise_variance": np.float64(-1.5),
        "inducing_index_points": rng.normal(size=(2, 3, 2)),
        "variational_inducing_observations_loc": rng.normal(size=(2, 3)),
        # Full matrices: both must read only the lower triangle.
        "variational_inducing_observations_scale": rng.normal(size=(2, 3, 3)),
    }
    theirs = tfp.layers.VariationalGaussianProcess(
        3, _PackedKernelProvider(raw), event_shape=[2],
        convert_to_tensor_fn=tfd.Distribution.mean)
    theirs(x)
    ours = VariationalGaussianProcess(
        3, ExponentiatedQuadraticProvider(*np.log1p(np.exp(raw))), event_shape=2,
        convert_to_tensor_fn="mean", dtype="float64")
    ours(x)
    for layer in (theirs, ours):
        for variable in layer.weights:
            if _short_name(variable) in params:
                variable.assign(params[_short_name(variable)])
    reference, value = theirs(x), ours(x)
    np.testing.assert_allclose(value, reference.mean(), rtol=1e-10)
    np.testing.assert_allclose(value.stddev(), reference.stddev(), rtol=1e-10)
    np.testing.assert_allclose(value.surrogate_posterior_kl_divergence_prior(),
                               reference.surrogate_posterior_kl_divergence_prior(), rtol=1e-10)
    np.testing.assert_allclose(value.variational_loss(y, kl_weight=0.25),
                               reference.variational_loss(y, kl_weight=0.25), rtol=1e-10)
    np.testing.assert_allclose(value.log_prob(y), reference.log_prob(y), rtol=1e-10)


def _eq_kernel(a, b, amplitude, length_scale):
    return amplitude ** 2 * np.exp(-0.5 * ((a[:, None, 0] - b[None, :, 0]) / length_scale) ** 2)


def test_inducing_points_at_the_data_with_the_exact_posterior_give_the_exact_gp():
    # Titsias (2009): with Z = X and q(u) the exact posterior of f(X), the SVGP
    # predictive is the exact GP posterior predictive and the ELBO is the log
    # marginal likelihood.
    x = np.linspace(-3.0, 3.0, 8)[:, None]
    y = np.sin(x[:, 0]) + np.random.default_rng(1).normal(scale=0.1, size=8)
    x_test = np.array([[-5.0], [-0.4], [0.0], [1.3], [7.0]])
    amplitude, length_scale, noise, prior_mean = 1.3, 0.9, 0.05, 0.3
    k_xx = _eq_kernel(x, x, amplitude, length_scale)
    k_sx = _eq_kernel(x_test, x, amplitude, length_scale)
    marginal = k_xx + noise * np.eye(8)
    alpha = np.linalg.solve(marginal, y - prior_mean)
    posterior_cov = k_xx - k_xx @ np.linalg.solve(marginal, k_xx)
    mean = prior_mean + k_sx @ alpha
    variance = amplitude ** 2 - np.sum(k_sx * np.linalg.solve(marginal, k_sx.T).T, 1) + noise
    _, logdet = np.linalg.slogdet(marginal)
    log_evidence = -0.5 * ((y - prior_mean) @ alpha + logdet + 8 * math.log(2 * math.pi))

    layer = VariationalGaussianProcess(
        8, ExponentiatedQuadraticProvider(amplitude, length_scale), event_shape=1,
        inducing_index_points_initializer=keras.initializers.Constant(x),
        unconstrained_observation_noise_variance_initializer=math.log(math.expm1(noise)),
        variational_inducing_observations_scale_initializer=keras.initializers.Constant(
            np.linalg.cholesky(posterior_cov)),
        jitter=0.0, convert_to_tensor_fn="mean", dtype="float64")
    layer(x)
    layer.mean.assign(prior_mean)
    layer.variational_inducing_observations_loc.assign((prior_mean + k_xx @ alpha)[None])
    # jitter=0: the predictive is the same algebra in float64; with lambda_min(K_zz)
    # >= 1e-5 (checked) the solves lose at most cond(K_zz) * 1e-16 < 1e-10 relative.
    assert np.linalg.eigvalsh(k_xx)[0] >= 1e-5
    value = layer(x_test)
    np.testing.assert_allclose(np.asarray(value)[:, 0], mean, atol=1e-9)
    np.testing.assert_allclose(np.asarray(value.variance())[:, 0], variance, atol=1e-9)
    (elbo,) = -np.asarray(layer(x).variational_loss(y[:, None], kl_weight=1.0))
    # TFP takes the expected log-likelihood under q(f) plus the noise, which adds
    # sigma^2 / (2 sigma^2) = 1/2 per observation to the loss (a constant: no effect
    # on gradients); the port keeps TFP's value. TFP's prior p(u) in the KL always
    # carries its own jitter eps = 1e-6 on K_zz; to first order it moves the KL by
    # eps / 2 * |tr(K^-1) - tr(K^-1 S K^-1) - |K^-1 (m - mu)|^2|, bounded below.
    k_inv = np.linalg.inv(k_xx)
    sensitivity = 0.5 * (np.trace(k_inv) + np.trace(k_inv @ posterior_cov @ k_inv)
                         + np.sum((k_inv @ (k_xx @ alpha)) ** 2))
    np.testing.assert_allclose(elbo, log_evidence - 8 / 2, atol=2e-6 * sensitivity)


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def negative_elbo(y, rv_y):
    # Full batch: the batch is the whole training set, so the KL weight is 1.
    return rv_y.variational_loss(y, kl_weight=1.0)


SINE_STEPS = 200  # steps_per_execution: one traced loop of 50 steps, 4 times


def sine_problem():
    """24 noisy points of sin(2x) in [-2, 2] and an untrained GP model for them."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-2.0, 2.0, size=(24, 1)).astype("float32")
    y = (np.sin(2.0 * x) + rng.normal(scale=0.1, size=x.shape)).astype("float32")
    model = keras.Sequential([keras.Input((1,)), VariationalGaussianProcess(
        8, ExponentiatedQuadraticProvider(length_scale=0.5),
        inducing_index_points_initializer=keras.initializers.Constant(
            np.linspace(-2.0, 2.0, 8)[:, None]),
        unconstrained_observation_noise_variance_initializer=-3.0,
        convert_to_tensor_fn="mean")])
    return x, y, model


@pytest.fixture(scope="module")
def sine_fit():
    """A GP on 24 noisy points of sin(2x) in [-2, 2], fitted full-batch by the ELBO."""
    keras.utils.set_random_seed(0)
    x, y, model = sine_problem()
    model.compile(keras.optimizers.Adam(0.05), loss=negative_elbo, steps_per_execution=50)
    model.optimizer.build(model.trainable_variables)  # else fit traces its step twice
    before = float(model(x).variational_loss(y)[0])
    model.fit(np.tile(x, (50, 1)), np.tile(y, (50, 1)), batch_size=24,
              epochs=SINE_STEPS // 50, verbose=0)
    after = float(model(x).variational_loss(y)[0])
    return model, before, after


def test_a_short_fit_lowers_the_negative_elbo(sine_fit):
    _, before, after = sine_fit
    # Full batch and no sampling in the loss: both values are deterministic. The
    # initial q(u) (loc 0, scale 1e-5) misses sin(2x) by O(1) at every point with a
    # noise variance of 0.05, so the loss starts near 200; a fit that trains ends
    # near 20 (measured 23), one that does not stays where it started.
    assert after < 0.25 * before


def test_predictive_stddev_grows_away_from_the_data(sine_fit):
    model, _, _ = sine_fit
    layer = model.layers[-1]
    value = model(np.array([[0.0], [1.0], [6.0], [-8.0]], "float32"))
    noise = float(tf.nn.softplus(layer.observation_noise_variance))
    latent = np.sqrt(np.asarray(value.variance())[:, 0] - noise)
    kernel = layer.kernel_provider.kernel
    amplitude = float(kernel.amplitude)
    far = np.asarray(kernel.matrix(np.array([[6.0], [-8.0]], "float32"),
                                   layer.inducing_index_points[0]))
    assert far.max() < 3.4e-4 * amplitude ** 2  # the premise of the rtol below
    # Where k(x, Z) < 3.4e-4 a^2 (4 length scales away) the latent stddev is the
    # prior's, a, to that relative error or better; near the data
    # the inducing points pin it down to well under half of it.
    np.testing.assert_allclose(latent[2:], amplitude, rtol=1e-3)
    assert max(latent[:2]) < 0.5 * amplitude


def test_keras_file_round_trip_in_safe_mode(sine_fit, tmp_path):
    model, _, _ = sine_fit
    path = tmp_path / "vgp.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = np.linspace(-3.0, 3.0, 7)[:, None].astype("float32")
    expected, value = model(x), loaded(x)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(value.stddev(), expected.stddev(), rtol=1e-6)
    assert isinstance(distribution_of(value), tfd.Distribution)
    assert loaded.layers[-1].get_config() == model.layers[-1].get_config()


@pytest.mark.parametrize("kwargs, message", [
    ({"num_inducing_points": 0}, r"`num_inducing_points` must be a positive int, got 0\."),
    ({"kernel_provider": "rbf"}, r"Unknown `kernel_provider` 'rbf'"),
    ({"event_shape": (2, 3)}, r"`event_shape` must have one axis \(E,\), got \(2, 3\)\."),
    ({"jitter": -1e-6}, r"`jitter` must be a finite number >= 0, got -1e-06\."),
    ({"mean_fn": 3.0}, r"`mean_fn` must be None or a callable x -> mean, got 3\.0\."),
    ({"inducing_index_points_initializer": "nope"},
     r"`inducing_index_points_initializer` must be a Keras initializer"),
    ({"unconstrained_observation_noise_variance_initializer": float("nan")},
     r"`unconstrained_observation_noise_variance_initializer` must be a finite number"),
    ({"convert_to_tensor_fn": "median"}, r"`convert_to_tensor_fn` must be one of"),
])
def test_bad_arguments_raise_one_line_errors(kwargs, message):
    arguments = {"num_inducing_points": 4, "kernel_provider": "exponentiated_quadratic",
                 **kwargs}
    with pytest.raises(ValueError, match=message) as error:
        VariationalGaussianProcess(**arguments)
    assert "\n" not in str(error.value)


def test_inputs_without_a_feature_axis_are_refused():
    with pytest.raises(ValueError, match=r"needs inputs \[batch, features\]"):
        VariationalGaussianProcess(4, "exponentiated_quadratic")(np.zeros(5, "float32"))


# -- On both backends (marked `jax`): float32, as JAX runs without x64 -----------------

def _numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


@pytest.mark.jax
def test_make_distribution_is_the_svgp_predictive_on_the_backends_substrate():
    # The layer's distribution (TFP's TensorFlow or JAX substrate) against the SVGP
    # algebra in NumPy float64: mean mu + K_xz K_zz^-1 (m - mu) and variance
    # k(x, x) - k_xz K_zz^-1 (K_zz - S S^T) K_zz^-1 k_zx + sigma^2; float32 with
    # cond(K_zz) < 30 here: rtol 1e-4.
    rng = np.random.default_rng(4)
    x = rng.uniform(-2.0, 2.0, (5, 1)).astype("float32")
    z = np.array([[-1.5], [0.0], [1.5]])
    loc = np.array([0.4, -0.7, 1.1])
    scale = np.tril(rng.normal(scale=0.3, size=(3, 3))) + np.eye(3)
    amplitude, length_scale, noise, prior_mean = 1.2, 0.8, 0.1, 0.3
    layer = VariationalGaussianProcess(
        3, ExponentiatedQuadraticProvider(amplitude, length_scale),
        inducing_index_points_initializer=keras.initializers.Constant(z),
        unconstrained_observation_noise_variance_initializer=math.log(math.expm1(noise)),
        variational_inducing_observations_scale_initializer=keras.initializers.Constant(
            scale), jitter=0.0)
    layer.build((None, 1))
    layer.mean.assign(prior_mean)
    layer.variational_inducing_observations_loc.assign(loc[None].astype("float32"))

    def moments(points):
        distribution = layer.make_distribution(points)
        return (distribution.mean(), distribution.variance(),
                distribution.variational_loss(np.zeros((5, 1), "float32")))

    if keras.backend.backend() == "jax":  # one compilation, as in a training step
        import jax  # noqa: PLC0415

        moments = jax.jit(moments)
    predicted_mean, predicted_variance, loss = (_numpy(v) for v in moments(x))
    x64 = x.astype(np.float64)
    k_zz, k_xz = _eq_kernel(z, z, amplitude, length_scale), _eq_kernel(
        x64, z, amplitude, length_scale)
    assert np.linalg.cond(k_zz) < 30
    weights = np.linalg.solve(k_zz, k_xz.T).T
    mean = prior_mean + weights @ (loc - prior_mean)
    variance = (amplitude ** 2 - np.sum(weights * ((k_zz - scale @ scale.T) @ weights.T).T, 1)
                + noise)
    np.testing.assert_allclose(predicted_mean[:, 0], mean, rtol=1e-4)
    np.testing.assert_allclose(predicted_variance[:, 0], variance, rtol=1e-4)
    assert loss.shape == (1,) and np.isfinite(loss).all()


@pytest.mark.jax
def test_tfps_lambda_loss_trains_in_a_compiled_fit():
    # TFP's regression-tutorial loss `rv_y.variational_loss(y, ...)` on the model's
    # output, in `fit` (on JAX the output array forwards it through the carrier's
    # table). Full batch, no sampling in the loss: the values are deterministic; the
    # initial q(u) misses sin(2x) by O(1) with noise variance 0.05, a loss near 200,
    # and SINE_STEPS Adam steps at 0.05 bring it well under a quarter of that.
    x, y, model = sine_problem()
    model.compile(keras.optimizers.Adam(0.05),
                  loss=lambda y, rv_y: rv_y.variational_loss(y, kl_weight=1.0),
                  steps_per_execution=50)
    before = model.evaluate(x, y, batch_size=24, verbose=0)
    model.fit(np.tile(x, (50, 1)), np.tile(y, (50, 1)), batch_size=24,
              epochs=SINE_STEPS // 50, verbose=0)
    after = model.evaluate(x, y, batch_size=24, verbose=0)
    assert before > 100 and np.isfinite(after) and after < 0.25 * before
    predictive = model(x)  # eagerly: the distribution (JAX), a carrying tensor (TF)
    np.testing.assert_allclose(_numpy(predictive.variational_loss(y))[0], after, rtol=1e-4)

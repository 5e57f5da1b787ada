"""DenseVariational: one posterior over [kernel, bias], any posterior and prior.

Monte Carlo checks are |z| <= K tests with standard errors from the number
of draws (see tests/integration/test_tfp_parity_dense.py for the design): with
K = 4.5 a correct implementation fails one check with probability < 1e-5,
and the seeds are fixed, so the tests are deterministic.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from keras.src import testing

from tests.integration import parity_checks
import tfp_bnn
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseVariational
from tfp_bnn.testing.layer_test import run_bayesian_layer_test

tfd = tfp.distributions

INPUT_DIM, UNITS = 3, 2
SIZE = INPUT_DIM * UNITS + UNITS
NUM_DRAWS = 4000
K = 4.5


def _softplus(x):
    return np.logaddexp(0.0, x)


def _inputs(rows=4, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, INPUT_DIM)).astype("float32")


def _design(x):
    """A [units, SIZE]: y = A w for one input row x and w = [flatten(kernel), bias]."""
    a = np.zeros((UNITS, SIZE))
    for u in range(UNITS):
        a[u, u:INPUT_DIM * UNITS:UNITS] = x
        a[u, INPUT_DIM * UNITS + u] = 1.0
    return a


@pytest.fixture(scope="module")
def full_covariance_layer():
    """A full-covariance layer with strong, fixed correlations (float64 copies of its params)."""
    rng = np.random.default_rng(7)
    layer = DenseVariational(UNITS, posterior=posteriors.FullCovarianceNormal(),
                             prior=priors.NormalPrior(0.2, 0.8), kl_use_exact=True,
                             kl_weight=1.0, seed=3)
    layer.build((None, INPUT_DIM))
    loc, rho, tril = layer.kernel_params
    loc.assign(rng.normal(0.0, 0.5, SIZE).astype("float32"))
    rho.assign(rng.normal(-2.0, 0.3, SIZE).astype("float32"))
    tril.assign(rng.normal(0.0, 0.6, SIZE * (SIZE - 1) // 2).astype("float32"))
    scale_tril = layer.posterior.prepare(layer.kernel_params).scale_tril.numpy()
    return layer, loc.numpy().astype(np.float64), np.asarray(scale_tril, np.float64)


# -- the standard battery -------------------------------------------------------

# Marked `jax`: the cases that run on both backends (FullCovarianceNormal is
# TensorFlow only so far).
@pytest.mark.parametrize("kwargs, input_shape", [
    pytest.param({"units": 3, "kl_weight": 0.01}, (8, 4), marks=pytest.mark.jax),
    ({"units": 2, "kl_weight": 0.01, "posterior": posteriors.FullCovarianceNormal(),
      "prior": priors.TrainableNormalPrior(trainable_scale=True), "kl_use_exact": True}, (8, 4)),
    pytest.param({"units": 3, "kl_weight": 0.01, "use_bias": False, "activation": "relu"},
                 (4, 2, 5), marks=pytest.mark.jax),
], ids=["mean_field", "full_covariance_trainable_prior", "no_bias_rank3"])
def test_standard_layer_checks(kwargs, input_shape):
    run_bayesian_layer_test(DenseVariational, kwargs, input_shape)


@pytest.mark.jax
def test_mixed_precision_keeps_the_kl_in_float32(mixed_float16):
    layer = DenseVariational(UNITS, posterior="full_covariance_normal",
                             prior="trainable_normal", kl_weight=1.0, seed=0)
    y = layer(_inputs(), training=True)
    assert y.dtype == "float16"
    assert layer.losses[0].dtype == "float32" and np.isfinite(float(layer.losses[0]))
    assert all(v.dtype == "float32" for v in layer.trainable_variables)


@pytest.mark.jax
def test_keras_run_layer_test():
    """Keras 3's own harness (no expected output: the layer is stochastic)."""
    testing.TestCase().run_layer_test(
        DenseVariational,
        {"units": 3, "prior": "trainable_normal", "kl_weight": 0.1, "seed": 0},
        input_shape=(2, 4),
        expected_output_shape=(2, 3),
        expected_num_trainable_weights=3,  # posterior loc and rho, prior loc
        expected_num_non_trainable_weights=2,  # kl_weight, sampling switch
        expected_num_seed_generators=1,
        expected_num_losses=1,
        supports_masking=True,  # as keras.layers.Dense
    )


@pytest.mark.jax
def test_config_says_kl_estimator_and_round_trips():
    layer = DenseVariational(4, posterior="full_covariance_normal", prior="trainable_normal",
                             kl_use_exact=True, use_bias=False, activation="relu")
    config = layer.get_config()
    assert config["kl_estimator"] == "analytic" and layer.kl_use_exact is True
    assert "kl_use_exact" not in config and "bayesian_bias" not in config
    clone = DenseVariational.from_config(config)
    assert clone.get_config() == config
    assert clone.posterior == posteriors.FullCovarianceNormal()


@pytest.mark.parametrize("kl_use_exact, estimator", [(True, "analytic"), (False, "mc")])
def test_a_config_with_kl_use_exact_alone_loads(kl_use_exact, estimator):
    # What DenseVariational's get_config wrote before it stored `kl_estimator`.
    config = DenseVariational(3).get_config()
    del config["kl_estimator"]
    config["kl_use_exact"] = kl_use_exact
    layer = DenseVariational.from_config(config)
    assert layer.kl_estimator == estimator and layer.kl_use_exact is kl_use_exact


@pytest.mark.parametrize("kwargs, estimator", [
    ({}, "mc"),  # TFP's default, kl_use_exact=False
    ({"kl_estimator": "analytic"}, "analytic"),
    ({"kl_use_exact": True, "kl_estimator": "analytic"}, "analytic"),
    ({"kl_use_exact": False, "kl_estimator": "mc"}, "mc"),
    ({"kl_estimator": "auto"}, "auto"),
])
def test_kl_estimator_is_the_name_and_kl_use_exact_its_tfp_alias(kwargs, estimator):
    assert DenseVariational(2, **kwargs).kl_estimator == estimator


@pytest.mark.parametrize("make, argument", [
    (lambda: DenseVariational(2, kl_use_exact=1), "kl_use_exact"),
    (lambda: DenseVariational(2, prior=priors.ScaleMixturePrior(), kl_use_exact=True),
     "kl_use_exact"),
    (lambda: DenseVariational(2, kl_use_exact=True, kl_estimator="mc"), "disagree"),
    (lambda: DenseVariational(2, kl_use_exact=False, kl_estimator="auto"), "disagree"),
    (lambda: DenseVariational(2, kl_estimator="exact"), "kl_estimator"),
    (lambda: DenseVariational(2, prior=priors.ScaleMixturePrior(), kl_estimator="analytic"),
     "kl_estimator"),
    (lambda: DenseVariational(2, make_posterior_fn=None), "make_posterior_fn"),
    (lambda: DenseVariational(2, make_prior_fn=None), "make_prior_fn"),
    (lambda: DenseVariational(0), "units"),
    (lambda: DenseFlipout(2, posterior=posteriors.FullCovarianceNormal()), "location-scale"),
])
@pytest.mark.jax
def test_bad_arguments_are_named(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


@pytest.mark.jax
def test_tfp_positional_builders_are_refused_with_the_objects_to_write():
    pytest.importorskip("tf_keras")  # TFP's builders are tf_keras models
    from tests.integration import tfp_builders  # noqa: PLC0415 - after the skip

    with pytest.raises(ValueError, match=r"^`posterior` got a function, as TFP's positional "
                       r"`make_posterior_fn`: .*FullCovarianceNormal\(rho_init=0.0") as info:
        DenseVariational(1, tfp_builders.keras_io_posterior, tfp_builders.keras_io_prior)
    assert "\n" not in str(info.value) and "MeanFieldNormal" not in str(info.value)
    with pytest.raises(ValueError, match=r"^`prior` got a function, as TFP's positional "
                       r"`make_prior_fn`: .*TrainableNormalPrior\(\)"):
        DenseVariational(1, posteriors.MeanFieldNormal(), tfp_builders.prior_trainable)
    with pytest.raises(ValueError, match=r"^`make_posterior_fn` is not an argument of "
                       r"DenseVariational: .*FullCovarianceNormal") as info:
        DenseVariational(1, make_posterior_fn=tfp_builders.keras_io_posterior)
    assert "MeanFieldNormal" not in str(info.value)


# -- one weight vector per call ---------------------------------------------------

@pytest.mark.jax
def test_one_sample_per_call_splits_into_kernel_and_bias():
    """Rows [0; I] of one call read out w = [kernel, bias]: the batch shares it."""
    layer = DenseVariational(UNITS, kl_weight=1.0, seed=0)
    layer.build((None, INPUT_DIM))
    layer.kernel_params[1].assign(np.full(SIZE, 0.0, "float32"))  # sigma = 0.69: visible noise
    x = np.concatenate([np.zeros((1, INPUT_DIM)), np.eye(INPUT_DIM)]).astype("float32")
    y = keras.ops.convert_to_numpy(layer(x, training=True))
    bias = y[0]
    kernel = y[1:] - bias
    w = np.concatenate([kernel.ravel(), bias])
    loc = layer.kernel_params[0].numpy()
    assert not np.allclose(w, loc, atol=1e-2), "the call did not sample"
    # The loss is the MC KL log q(w') - log p(w') at a fresh draw w': the one
    # the next call makes from the same generator state.
    state = layer.seed_generator.state.numpy()
    kl = float(layer.losses[0])
    layer.seed_generator.state.assign(state)
    y = keras.ops.convert_to_numpy(layer(x, training=True))
    fresh = np.concatenate([(y[1:] - y[0]).ravel(), y[0]]).astype("float32")
    assert not np.allclose(fresh, w, atol=1e-2)
    q = layer.kernel_posterior
    p = layer.kernel_prior
    expected = float(q.log_prob(fresh) - p.log_prob(fresh))
    np.testing.assert_allclose(kl, expected, rtol=1e-4, atol=1e-4)


def test_mean_mode_gives_posterior_mean_outputs():
    layer = DenseVariational(UNITS, activation="tanh", kl_weight=1.0, seed=1)
    x = _inputs()
    layer(x)
    loc = layer.kernel_params[0].numpy()
    expected = np.tanh(x @ loc[:-UNITS].reshape(INPUT_DIM, UNITS) + loc[-UNITS:])
    tfp_bnn.set_mean_mode(layer)
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    model = keras.Sequential([keras.Input((INPUT_DIM,)), layer])
    draws = tfp_bnn.predict.sample(model, x, num_samples=3)
    assert draws.shape == (3, len(x), UNITS)
    np.testing.assert_allclose(draws, np.broadcast_to(expected, draws.shape), rtol=1e-5,
                               atol=1e-6)
    tfp_bnn.set_mean_mode(layer, False)
    assert not np.allclose(layer(x).numpy(), expected)


@pytest.mark.jax
def test_kl_weight_is_a_variable_the_scheduler_finds():
    model = keras.Sequential([keras.Input((INPUT_DIM,)), DenseVariational(UNITS,
                                                                          kl_use_exact=True)])
    assert tfp_bnn.kl_layers(model) == [model.layers[0]]
    model.layers[0].kl_weight.assign(0.25)
    model(_inputs())
    np.testing.assert_allclose(float(model.losses[0]),
                               0.25 * float(model.layers[0].kl_divergence()), rtol=1e-6)


@pytest.mark.jax
def test_posterior_moments_split_the_joint_vector():
    layer = DenseVariational(UNITS, kl_weight=1.0, seed=2)
    layer.build((None, INPUT_DIM))
    kernel_loc, kernel_var, bias_loc, bias_var = layer.posterior_moments()
    loc, rho = (v.numpy() for v in layer.kernel_params)
    np.testing.assert_allclose(kernel_loc, loc[:-UNITS].reshape(INPUT_DIM, UNITS))
    np.testing.assert_allclose(bias_loc, loc[-UNITS:])
    np.testing.assert_allclose(bias_var, _softplus(rho[-UNITS:]) ** 2, rtol=1e-5)
    assert kernel_var.shape == (INPUT_DIM, UNITS)


def test_kernel_regularizer_sees_the_kernel_part_only():
    layer = DenseVariational(UNITS, kernel_regularizer=keras.regularizers.L2(1.0),
                             bias_initializer="ones", kernel_initializer="zeros")
    layer.build((None, INPUT_DIM))
    assert float(tf.add_n(layer.losses)) == 0.0  # the bias part (ones) is not penalized
    layer.kernel_params[0].assign(np.ones(SIZE, "float32"))
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), INPUT_DIM * UNITS)


# -- the full-covariance posterior ------------------------------------------------

def test_full_covariance_scale_tril_is_the_documented_parameterization(full_covariance_layer):
    layer, _, scale_tril = full_covariance_layer
    _, rho, tril = (v.numpy() for v in layer.kernel_params)
    assert np.allclose(np.triu(scale_tril, 1), 0.0)
    np.testing.assert_allclose(np.diag(scale_tril), _softplus(rho), rtol=1e-5)
    np.testing.assert_allclose(np.sort(scale_tril[np.tril_indices(SIZE, -1)]), np.sort(tril))


def test_full_covariance_kl_matches_tfp(full_covariance_layer):
    layer, loc, scale_tril = full_covariance_layer
    q = tfd.MultivariateNormalTriL(loc, scale_tril)
    p = tfd.MultivariateNormalDiag(np.full(SIZE, 0.2), np.full(SIZE, 0.8))
    expected = float(tfd.kl_divergence(q, p))
    np.testing.assert_allclose(float(layer.kl_divergence()), expected, rtol=1e-5)


def test_full_covariance_mc_kl_is_unbiased():
    rng = np.random.default_rng(11)
    layer = DenseVariational(UNITS, posterior=posteriors.FullCovarianceNormal(), seed=5,
                             prior=priors.NormalPrior(0.0, 0.5))
    layer.build((None, INPUT_DIM))
    loc, rho, tril = layer.kernel_params
    loc.assign(rng.normal(0.0, 0.5, SIZE).astype("float32"))
    rho.assign(rng.normal(-1.0, 0.3, SIZE).astype("float32"))
    tril.assign(rng.normal(0.0, 0.3, tril.shape).astype("float32"))
    @tf.function
    def loop(num_draws=1000):
        def body(i, draws):
            return i + 1, draws.write(i, layer.kl_divergence())

        _, draws = tf.while_loop(lambda i, _: i < num_draws, body,
                                 (tf.constant(0), tf.TensorArray(tf.float32, size=num_draws)))
        return draws.stack()

    estimates = loop().numpy().astype(np.float64)
    assert estimates.std() > 0.1  # distinct samples
    prepared = layer.posterior.prepare(layer.kernel_params)
    exact = float(layer.posterior.kl(prepared, layer.prior))
    se = estimates.std(ddof=1) / math.sqrt(len(estimates))
    assert abs(estimates.mean() - exact) <= K * se, (estimates.mean(), exact, se)


@pytest.mark.parametrize("path", ["calls", "predict"])
def test_full_covariance_output_covariance_is_analytic(full_covariance_layer, path):
    """y = A w: mean A loc, covariance A L L^T A^T, so the two units correlate."""
    layer, loc, scale_tril = full_covariance_layer
    x = _inputs(rows=1, seed=9)
    if path == "calls":
        y = parity_checks.draw_calls(layer, x, NUM_DRAWS)[:, 0]
    else:
        model = keras.Sequential([keras.Input((INPUT_DIM,)), layer])
        y = tfp_bnn.predict.sample(model, x, num_samples=NUM_DRAWS)[:, 0].astype(np.float64)
    a = _design(x[0].astype(np.float64))
    mean, cov = a @ loc, a @ scale_tril @ scale_tril.T @ a.T
    t = len(y)
    z_mean = np.abs(y.mean(0) - mean) / np.sqrt(np.diag(cov) / t)
    assert np.all(z_mean <= K), z_mean
    centred = y - y.mean(0)
    var = centred.var(0, ddof=1)
    z_var = np.abs(var - np.diag(cov)) / (np.diag(cov) * math.sqrt(2.0 / (t - 1)))
    assert np.all(z_var <= K), z_var
    products = centred[:, 0] * centred[:, 1]
    se = products.std(ddof=1) / math.sqrt(t)
    assert abs(products.mean() - cov[0, 1]) <= K * se, (products.mean(), cov[0, 1], se)
    # Power: the covariance is more than 2 K standard errors from zero, so an
    # implementation that ignored the correlations would fail the check above.
    assert abs(cov[0, 1]) > 2 * K * se, (cov[0, 1], se)


# -- the trainable prior -----------------------------------------------------------

def test_trainable_prior_trains_and_its_kl_is_in_the_loss():
    rng = np.random.default_rng(3)
    x = _inputs(rows=32, seed=4)
    y = (x @ rng.normal(size=(INPUT_DIM, 1))).astype("float32")
    layer = DenseVariational(1, prior=priors.TrainableNormalPrior(trainable_scale=True),
                             kl_use_exact=True, kl_weight=0.1, seed=6)
    model = keras.Sequential([keras.Input((INPUT_DIM,)), layer])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    prior_vars = [v for v in layer.trainable_variables if "prior" in v.path]
    assert [v.path.split("/")[-1] for v in prior_vars] == ["prior_loc", "prior_rho"]
    before = [v.numpy().copy() for v in prior_vars]
    model.fit(x, y, epochs=5, batch_size=32, verbose=0)
    for b, v in zip(before, prior_vars):
        assert np.abs(v.numpy() - b).max() > 1e-3, f"{v.path} did not train"
    # In mean mode the loss is mse(posterior-mean outputs) + kl_weight * KL
    # with the prior's current variables, in closed form.
    tfp_bnn.set_mean_mode(model)
    loc, rho = (v.numpy().astype(np.float64) for v in layer.kernel_params)
    m0, s0 = prior_vars[0].numpy(), _softplus(prior_vars[1].numpy().astype(np.float64))
    sigma = _softplus(rho)
    kl = np.sum(np.log(s0 / sigma) + (sigma**2 + (loc - m0) ** 2) / (2 * s0**2) - 0.5)
    outputs = x @ loc[:INPUT_DIM].reshape(INPUT_DIM, 1) + loc[INPUT_DIM:]
    expected = np.mean((outputs - y) ** 2) + 0.1 * kl
    loss = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)["loss"]
    np.testing.assert_allclose(loss, expected, rtol=1e-4)
    # d KL / d m0 = (m0 - m) / s0^2: the prior's gradient flows.
    with tf.GradientTape() as tape:
        value = layer.kl_divergence()
    grad = tape.gradient(value, prior_vars[0]).numpy()
    np.testing.assert_allclose(grad, (m0 - loc) / s0**2, rtol=1e-4, atol=1e-5)


def test_mean_field_scale_offset_is_tfps_posterior_mean_field_scale():
    post = posteriors.MeanFieldNormal(rho_init=math.log(math.e - 1), rho_init_stddev=0.0,
                                      scale_offset=1e-5)
    layer = DenseVariational(UNITS, posterior=post, kernel_initializer="zeros")
    layer.build((None, INPUT_DIM))
    loc, scale = post.prepare(layer.kernel_params)
    np.testing.assert_array_equal(loc.numpy(), 0.0)
    np.testing.assert_allclose(scale.numpy(), 1.0 + 1e-5, rtol=1e-6)
    draw = post.draw(layer.kernel_params, tf.constant([1, 2]), "float32")
    np.testing.assert_allclose(draw.prepared[1].numpy(), scale.numpy())
    # Configs saved before `scale_offset` existed still load, as offset 0.
    old = posteriors.MeanFieldNormal.from_config({"rho_init": -3.0, "rho_init_stddev": 0.1})
    assert old == posteriors.MeanFieldNormal() and old.scale_offset == 0.0
    with pytest.raises(ValueError, match="`scale_offset`"):
        posteriors.MeanFieldNormal(scale_offset=-1.0)

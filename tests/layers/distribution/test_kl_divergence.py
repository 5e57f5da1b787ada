"""KLDivergenceRegularizer and KLDivergenceAddLoss: the KL of a distribution layer's output.

Deterministic checks use convert_to_tensor_fn="mean": the default test
points are then the distribution's mean, and the Monte Carlo term has an
exact value to compare with.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn import layers
from tfp_bnn._substrate import tfd as tfd_substrate
from tfp_bnn.distributions import distribution_of

tfd = tfp.distributions

PARAMS = layers.MultivariateNormalTriL.params_size(2)


def _prior(dtype="float32"):
    return tfd.Independent(tfd.Normal(tf.zeros(2, dtype), 1.0), reinterpreted_batch_ndims=1)


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def standard_normal_prior():
    return tfd.MultivariateNormalDiag(loc=tf.zeros(2))


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def eight_draws(output):
    return output.sample(8, seed=(1, 2))


def _data(rows=8):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(rows, 3)).astype("float32"),
            rng.normal(size=(rows, 2)).astype("float32"))


def _encoder(kind, **kl):
    """Dense -> MultivariateNormalTriL(2) with the KL as `kind` puts it."""
    head = {"convert_to_tensor_fn": "mean", "seed": 0}
    if kind == "regularizer":
        head["activity_regularizer"] = layers.KLDivergenceRegularizer(_prior(), **kl)
    stack = [keras.Input((3,)),
             keras.layers.Dense(PARAMS, kernel_initializer=keras.initializers.GlorotUniform(1)),
             layers.MultivariateNormalTriL(2, **head)]
    if kind == "add_loss":
        stack.append(layers.KLDivergenceAddLoss(_prior(), **kl))
    return keras.Sequential(stack)


def _expected_kl(model, x, kind, weight=1.0):
    """The term as TFP defines it, from the carried distribution at its mean."""
    distribution = distribution_of(model(x))
    z = distribution.mean()
    gap = distribution.log_prob(z) - _prior().log_prob(z)
    if kind == "regularizer":   # reduce axis (): summed, then Keras divides by the batch
        return weight * float(tf.reduce_sum(gap)) / len(x)
    return weight * float(tf.reduce_mean(gap))   # the layer's default axis None


def test_the_tfp_vae_encoder_builds_on_symbolic_tensors_and_trains():
    # The model a hand-written KL layer could not build (its symbolic input
    # carries no distribution).
    x, y = _data()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(PARAMS),
                              layers.MultivariateNormalTriL(2),
                              layers.KLDivergenceAddLoss(_prior())])
    model.compile("adam", loss=lambda y, rv_y: -rv_y.log_prob(y))
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert distribution_of(model(x)).event_shape == (2,)


@pytest.mark.parametrize("kind", ["regularizer", "add_loss"])
def test_the_total_loss_is_nll_plus_the_kl_once(kind):
    x, y = _data()
    model = _encoder(kind, weight=2.0)
    model.compile(keras.optimizers.SGD(0.0), loss=lambda y, rv_y: -rv_y.log_prob(y))
    kl = _expected_kl(model, x, kind, weight=2.0)
    nll = float(tf.reduce_mean(-distribution_of(model(x)).log_prob(y)))
    assert len(model.losses) == 1
    np.testing.assert_allclose(float(model.losses[0]), kl, rtol=1e-6)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=len(x), verbose=0), nll + kl,
                               rtol=1e-5)
    # One training step (learning rate 0: the loss of the step is the same).
    np.testing.assert_allclose(model.train_on_batch(x, y), nll + kl, rtol=1e-5)


def test_reduce_axis_averages_the_test_points_as_tfp_does():
    x, _ = _data()
    output = _encoder("none")(x)
    distribution = distribution_of(output)
    gap = distribution.log_prob(output) - _prior().log_prob(output)
    for axis, expected in [((), tf.reduce_sum(gap)), (None, tf.reduce_mean(gap)),
                           (0, tf.reduce_mean(gap)), ((0,), tf.reduce_mean(gap))]:
        term = layers.KLDivergenceRegularizer(_prior(), test_points_reduce_axis=axis)(output)
        np.testing.assert_allclose(term, expected, rtol=1e-6, err_msg=str(axis))


def test_exact_kl_and_test_points_of_ones_own():
    x, _ = _data()
    output = _encoder("none")(x)
    distribution = distribution_of(output)
    prior = standard_normal_prior()
    exact = layers.KLDivergenceRegularizer(standard_normal_prior, use_exact_kl=True)(output)
    np.testing.assert_allclose(exact, tf.reduce_sum(tfd.kl_divergence(distribution, prior)),
                               rtol=1e-6)
    # test_points_fn gets the output, which forwards `sample` to its distribution.
    mc = layers.KLDivergenceRegularizer(prior, test_points_fn=eight_draws,
                                        test_points_reduce_axis=0)(output)
    z = distribution.sample(8, seed=(1, 2))
    np.testing.assert_allclose(
        mc, tf.reduce_sum(tf.reduce_mean(distribution.log_prob(z) - prior.log_prob(z), 0)),
        rtol=1e-6)


def test_kl_estimator_names_the_estimator_and_use_exact_kl_is_its_tfp_alias():
    x, _ = _data()
    output = _encoder("none")(x)
    distribution = distribution_of(output)
    exact = tf.reduce_sum(tfd.kl_divergence(distribution, standard_normal_prior()))
    for kwargs in ({"kl_estimator": "analytic"}, {"use_exact_kl": True},
                   {"use_exact_kl": True, "kl_estimator": "analytic"}, {"kl_estimator": "auto"}):
        term = layers.KLDivergenceRegularizer(standard_normal_prior, **kwargs)(output)
        np.testing.assert_allclose(term, exact, rtol=1e-6, err_msg=str(kwargs))
    # No closed form for MultivariateNormalTriL against Independent(Normal):
    # "auto" falls back to the Monte Carlo estimate, "analytic" says so.
    mc = layers.KLDivergenceRegularizer(_prior())(output)
    auto = layers.KLDivergenceRegularizer(_prior(), kl_estimator="auto")(output)
    np.testing.assert_array_equal(auto, mc)
    with pytest.raises(NotImplementedError):
        layers.KLDivergenceRegularizer(_prior(), kl_estimator="analytic")(output)


@pytest.mark.parametrize("use_exact_kl, estimator", [(True, "analytic"), (False, "mc")])
def test_a_config_with_use_exact_kl_alone_loads(use_exact_kl, estimator):
    # What get_config wrote before it stored `kl_estimator`.
    config = layers.KLDivergenceAddLoss(standard_normal_prior, name="kl").get_config()
    del config["kl_estimator"]
    config["use_exact_kl"] = use_exact_kl
    restored = layers.KLDivergenceAddLoss.from_config(config)
    assert restored._regularizer.kl_estimator == estimator
    assert restored._regularizer.use_exact_kl is use_exact_kl


@pytest.mark.parametrize("kind", ["regularizer", "add_loss"])
def test_saved_and_loaded_with_safe_mode(kind, tmp_path):
    x, _ = _data()
    kl = {"use_exact_kl": False, "test_points_reduce_axis": [0], "weight": 0.5}
    model = _encoder(kind, **kl)
    model(x)
    before = float(model.losses[0])
    path = tmp_path / "encoder.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    loaded(x)
    np.testing.assert_allclose(float(loaded.losses[0]), before, rtol=1e-6)
    head = loaded.layers[-1]
    restored = head.activity_regularizer if kind == "regularizer" else head._regularizer
    assert (restored.test_points_reduce_axis, restored.weight) == ((0,), 0.5)


def test_a_callable_prior_and_a_registered_test_points_fn_round_trip():
    layer = layers.KLDivergenceAddLoss(standard_normal_prior, test_points_fn=eight_draws,
                                       use_exact_kl=True, name="kl")
    restored = layers.KLDivergenceAddLoss.from_config(layer.get_config())
    assert restored.distribution_b is standard_normal_prior
    assert restored._regularizer.test_points_fn is eight_draws
    assert restored.get_config() == layer.get_config()


def test_a_float32_prior_serves_a_float64_model():
    x, _ = _data()
    head = layers.MultivariateNormalTriL(
        2, convert_to_tensor_fn="mean", dtype="float64",
        activity_regularizer=layers.KLDivergenceRegularizer(_prior()))
    head(x.astype("float64") @ np.ones((3, PARAMS)))
    assert head.losses[0].dtype == tf.float64


@pytest.mark.parametrize("make, argument", [
    (lambda: layers.KLDivergenceRegularizer(tfd.Normal(tf.Variable(0.0), 1.0)),
     "distribution_b"),
    (lambda: layers.KLDivergenceAddLoss(3.0), "distribution_b"),
    (lambda: layers.KLDivergenceAddLoss(keras.layers.Dense(2)), "distribution_b"),
    (lambda: layers.KLDivergenceRegularizer(_prior(), use_exact_kl="yes"), "use_exact_kl"),
    (lambda: layers.KLDivergenceRegularizer(_prior(), kl_estimator="exact"), "kl_estimator"),
    (lambda: layers.KLDivergenceAddLoss(_prior(), use_exact_kl=False, kl_estimator="analytic"),
     "kl_estimator"),
    (lambda: layers.KLDivergenceRegularizer(_prior(), test_points_reduce_axis=1.5),
     "test_points_reduce_axis"),
    (lambda: layers.KLDivergenceRegularizer(_prior(), test_points_reduce_axis=[0, "a"]),
     r"test_points_reduce_axis\[1\]"),
    (lambda: layers.KLDivergenceRegularizer(_prior(), test_points_fn="sample"),
     "test_points_fn"),
    (lambda: layers.KLDivergenceAddLoss(_prior(), weight="1"), "weight"),
])
def test_bad_arguments_get_one_line_naming_them(make, argument):
    with pytest.raises(ValueError, match=f"`{argument}`") as error:
        make()
    assert "\n" not in str(error.value)


def test_an_input_without_a_distribution_is_refused_with_the_layers_name():
    with pytest.raises(ValueError, match="KLDivergenceAddLoss must come right after"):
        layers.KLDivergenceAddLoss(_prior())(tf.zeros([2, 2]))
    dense = keras.layers.Dense(2, activity_regularizer=layers.KLDivergenceRegularizer(_prior()))
    with pytest.raises(ValueError, match="KLDivergenceRegularizer needs the output"):
        dense(np.zeros((2, 3), "float32"))


@pytest.mark.jax
def test_exact_kl_of_the_substrates_distributions_enters_the_loss():
    params = np.random.default_rng(1).normal(size=(4, 4)).astype("float32")
    prior = tfd_substrate.Independent(tfd_substrate.Normal(np.zeros(2, "float32"), 1.0), 1)
    head = layers.IndependentNormal(2, convert_to_tensor_fn="mean")
    add_loss = layers.KLDivergenceAddLoss(prior, use_exact_kl=True, weight=0.5)
    output = add_loss(head(params))
    posterior = tfd_substrate.Independent(
        tfd_substrate.Normal(params[:, :2], keras.ops.softplus(params[:, 2:])), 1)
    expected = 0.5 * np.sum(tfd_substrate.kl_divergence(posterior, prior))
    assert len(add_loss.losses) == 1
    np.testing.assert_allclose(add_loss.losses[0], expected, rtol=1e-5)
    np.testing.assert_allclose(distribution_of(output).mean(), params[:, :2], rtol=1e-6)

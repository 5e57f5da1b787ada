"""DistributionLambda, the base of the output layers: arguments, saving, the value it returns."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
from tests.layers.distribution.distribution_heads import DISTRIBUTION_LAYERS
from tests.layers.distribution.distribution_heads import distribution_model
from tests.layers.distribution.distribution_heads import normal_head
from tests.layers.distribution.distribution_heads import normal_model
from tests.layers.distribution.distribution_heads import regression_data
from tfp_bnn import _backend
from tfp_bnn import layers
from tfp_bnn._substrate import tfd as tfd_substrate
from tfp_bnn.distributions import distribution_of

tfd = tfp.distributions


def test_bad_convert_to_tensor_fn_and_seed():
    with pytest.raises(ValueError, match="convert_to_tensor_fn"):
        layers.IndependentNormal(1, convert_to_tensor_fn="median")
    with pytest.raises(ValueError, match="seed"):
        layers.IndependentNormal(1, seed=-3)
    with pytest.raises(ValueError, match="no mean"):
        layers.Categorical(3, convert_to_tensor_fn="mean")
    with pytest.raises(ValueError, match="make_distribution_fn"):
        layers.DistributionLambda()


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def laplace_head(t):
    return tfd.Laplace(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:]))


def test_distribution_lambda_with_registered_function_saves(tmp_path):
    model = normal_model(layers.DistributionLambda(laplace_head, convert_to_tensor_fn="mode"))
    x, y = regression_data(64)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(distribution_of(loaded(x[:3])), tfd.Laplace)
    np.testing.assert_allclose(loaded(x[:3]), model(x[:3]), rtol=1e-6)


def test_output_of_a_later_operation_is_refused():
    value = layers.IndependentNormal(1)(np.zeros((3, 2), "float32"))
    with pytest.raises(ValueError, match="carries no distribution"):
        distribution_of(value + 1.0)
    with pytest.raises(ValueError, match="carries no distribution"):
        tfp_bnn.losses.NegativeLogLikelihood()(np.zeros((3, 1)), np.zeros((3, 1), "float32"))


# -- convert_to_tensor_fn: TFP's values save by name ---------------------------------------

def _saved_and_loaded(model, path, safe_mode=True):
    model.save(path)
    return keras.saving.load_model(path, safe_mode=safe_mode)


@pytest.mark.parametrize("name", sorted(DISTRIBUTION_LAYERS))
def test_tfp_convert_to_tensor_fn_values_save_and_load_in_safe_mode(name, tmp_path):
    value_name = DISTRIBUTION_LAYERS[name][3]
    method = getattr(tfd.Distribution, value_name)  # what a TFP program passes
    model = distribution_model(name, convert_to_tensor_fn=method)
    assert model.layers[-1].convert_to_tensor_fn == value_name
    loaded = _saved_and_loaded(model, tmp_path / "m.keras")
    x = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    assert loaded.layers[-1].convert_to_tensor_fn == value_name
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("value", ["stddev", "variance"])
def test_stddev_and_variance_are_values_too(value):
    layer = layers.IndependentNormal(1, convert_to_tensor_fn=getattr(tfd.Distribution, value))
    out = layer(np.zeros((2, 2), "float32"))
    np.testing.assert_allclose(out, getattr(out, value)(), rtol=1e-7)
    assert layer.get_config()["convert_to_tensor_fn"] == value


def test_a_file_that_saved_a_tfp_method_as_a_function_loads():
    config = layers.IndependentNormal(1).get_config()
    config["convert_to_tensor_fn"] = {
        "module": "tensorflow_probability.python.distributions.distribution",
        "class_name": "function", "config": "mean", "registered_name": "function"}
    assert layers.IndependentNormal.from_config(config).convert_to_tensor_fn == "mean"


def test_a_lambda_loads_with_safe_mode_false_as_for_keras_lambda(tmp_path):
    model = distribution_model("IndependentNormal", convert_to_tensor_fn=lambda d: d.mean())
    with pytest.warns(UserWarning, match="lambda"):
        loaded = _saved_and_loaded(model, tmp_path / "m.keras", safe_mode=False)
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6)


def _unregistered_mean(distribution):
    return distribution.mean()


def _unregistered_normal(t):
    return tfd.Normal(t[..., :1], 1.0)


@pytest.mark.parametrize("argument, kwargs", [
    ("convert_to_tensor_fn",
     {"make_distribution_fn": normal_head, "convert_to_tensor_fn": _unregistered_mean}),
    ("convert_to_tensor_fn", {"make_distribution_fn": normal_head,
                              "convert_to_tensor_fn": tfd.Normal(0.0, 1.0).mean}),
    ("make_distribution_fn", {"make_distribution_fn": _unregistered_normal}),
])
def test_an_unloadable_callable_is_refused_when_saving(argument, kwargs, tmp_path):
    """Saved by a name nothing finds again, it would fail only on loading."""
    layer = layers.DistributionLambda(**kwargs)
    with pytest.raises(ValueError, match=rf"^`{argument}`=.* cannot be saved: .*"
                                         r"register_keras_serializable"):
        layer.get_config()


# -- sizes as TFP takes them; params_size as TFP returns it --------------------------------

SIZED_AS_TFP = {
    "IndependentNormal": lambda: layers.IndependentNormal(tf.constant([2])),
    "IndependentLogistic": lambda: layers.IndependentLogistic(tf.constant(2)),
    "IndependentBernoulli": lambda: layers.IndependentBernoulli(np.int64(2)),
    "IndependentPoisson": lambda: layers.IndependentPoisson(tf.constant([2], tf.int64)),
    "Categorical": lambda: layers.Categorical(tf.constant(3)),
    "OneHotCategorical": lambda: layers.OneHotCategorical(tf.constant(3)),
    "MultivariateNormalTriL": lambda: layers.MultivariateNormalTriL(tf.constant(2)),
    "MixtureNormal": lambda: layers.MixtureNormal(tf.constant(3), tf.constant([2])),
    "MixtureLogistic": lambda: layers.MixtureLogistic(tf.constant(3), tf.constant(2)),
    "MixtureSameFamily": lambda: layers.MixtureSameFamily(
        tf.constant(2), layers.IndependentPoisson(tf.constant([2]))),
    "VariationalGaussianProcess": lambda: layers.VariationalGaussianProcess(
        tf.constant(4), "exponentiated_quadratic", event_shape=tf.constant([1])),
}


@pytest.mark.parametrize("name", sorted(SIZED_AS_TFP))
def test_int_tensor_sizes_are_taken_as_ints(name):
    layer = SIZED_AS_TFP[name]()
    json.dumps(layer.get_config())  # plain ints in the config
    assert all(type(d) is int for d in layer.compute_output_shape((5, 9))[1:])


@pytest.mark.parametrize("make, argument", [
    (lambda: layers.IndependentNormal(tf.constant([2.0])), "event_shape"),
    (lambda: layers.MultivariateNormalTriL(tf.constant(True)), "event_size"),
    (lambda: layers.MixtureNormal(tf.constant(-3), 1), "num_components"),
    (lambda: layers.OneHotCategorical(np.float32(3)), "event_size"),
])
def test_non_integer_sizes_are_refused_in_one_line(make, argument):
    with pytest.raises(ValueError, match=rf"^`{argument}` must be a positive int[^\n]*\.$"):
        make()


PARAMS_SIZES = [  # (layer, params_size arguments)
    ("IndependentNormal", ([2],)), ("IndependentLogistic", (2,)),
    ("IndependentBernoulli", (tf.constant([2]),)), ("IndependentPoisson", (2,)),
    ("OneHotCategorical", (3,)), ("MultivariateNormalTriL", (tf.constant(3),)),
    ("MixtureNormal", (3, [2])), ("MixtureLogistic", (tf.constant(3), 2)),
    ("MixtureSameFamily", (3, 4)),
]


@pytest.mark.parametrize("name, args", PARAMS_SIZES)
def test_params_size_reads_as_tfps_int32_and_feeds_keras_dense(name, args):
    import tf_keras  # noqa: F401, PLC0415 - TFP's layers need it first

    size = getattr(layers, name).params_size(*args)
    expected = getattr(tfp.layers, name).params_size(*args)
    assert size == int(expected)
    assert size.dtype == tf.int32 and size.shape == () and size.numpy().dtype == np.int32
    assert tf.convert_to_tensor(size).dtype == tf.int32
    dense = keras.layers.Dense(size)  # what ported programs write
    assert dense(np.zeros((1, 2), "float32")).shape == (1, int(expected))


# -- on either backend, with TFP's substrate for it ------------------------------------------

@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def substrate_laplace_head(t):
    return tfd_substrate.Laplace(t[..., :1], keras.ops.softplus(t[..., 1:]))


@pytest.mark.jax
def test_a_function_returning_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 2)).astype("float32")
    y = np.random.default_rng(2).normal(size=(4, 1)).astype("float32")
    expected = tfd_substrate.Laplace(params[:, :1], keras.ops.softplus(params[:, 1:]))
    distribution = distribution_of(layers.DistributionLambda(substrate_laplace_head)(params))
    assert isinstance(distribution, tfd_substrate.Laplace)
    np.testing.assert_allclose(distribution.log_prob(y), expected.log_prob(y), rtol=1e-5)


def _tfp_loss(y, rv_y):   # TFP's lambda loss, as its examples write it
    return -rv_y.log_prob(y)


@pytest.mark.jax
@pytest.mark.parametrize("loss, error, message", [
    (tfp_bnn.losses.negative_log_likelihood, ValueError, "carries no distribution"),
    (_tfp_loss, AttributeError, "no attribute 'log_prob'"),
], ids=["tfp_bnn", "tfp_lambda"])
def test_a_loss_after_a_later_layer_says_what_to_do(loss, error, message):
    model = normal_model()
    model.add(keras.layers.Rescaling(2.0))   # a new tensor: it carries nothing
    model.compile("adam", loss=loss)
    x, y = regression_data(8)
    if _backend.is_jax():   # one line naming the backend and the way out
        message += ".*On the JAX backend.*NegativeLogLikelihood"
    with pytest.raises(error, match=message):
        model.fit(x, y, verbose=0)

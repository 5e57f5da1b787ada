"""The distribution-valued output layers: TFP parity, training, saving, dtypes.

Parity: for the same parameters each layer's distribution has the same
log-density, mean and variance as `tfp.layers.<Name>.new` (the tf_keras
reference) and the same `params_size`.
"""

import pytest

tf_keras = pytest.importorskip("tf_keras")  # first: TFP's layers are built on it

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import tfp_bnn  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn.distributions import distribution_of  # noqa: E402

tfd = tfp.distributions
tfpl = tfp.layers

# (our layer, TFP's layer, constructor arguments, params_size arguments, target maker)
CASES = {
    "IndependentNormal": (layers.IndependentNormal, tfpl.IndependentNormal, ((2, 3),), ((2, 3),)),
    "IndependentLogistic": (layers.IndependentLogistic, tfpl.IndependentLogistic, (4,), (4,)),
    "IndependentBernoulli": (layers.IndependentBernoulli, tfpl.IndependentBernoulli, (3,), (3,)),
    "IndependentPoisson": (layers.IndependentPoisson, tfpl.IndependentPoisson, (3,), (3,)),
    "OneHotCategorical": (layers.OneHotCategorical, tfpl.OneHotCategorical, (5,), (5,)),
    "MultivariateNormalTriL": (layers.MultivariateNormalTriL, tfpl.MultivariateNormalTriL, (3,),
                               (3,)),
    "MixtureNormal": (layers.MixtureNormal, tfpl.MixtureNormal, (3, (2,)), (3, (2,))),
    "MixtureLogistic": (layers.MixtureLogistic, tfpl.MixtureLogistic, (2, 1), (2, 1)),
}


def test_mixture_same_family_matches_tfp():
    ours = layers.MixtureSameFamily(2, layers.IndependentPoisson(3), convert_to_tensor_fn="mean")
    size = layers.MixtureSameFamily.params_size(2, layers.IndependentPoisson.params_size(3))
    assert size == tfpl.MixtureSameFamily.params_size(2, tfpl.IndependentPoisson.params_size(3))
    params = np.random.default_rng(3).normal(size=(4, size)).astype("float32")
    ref = tfpl.MixtureSameFamily.new(tf.constant(params), 2, tfpl.IndependentPoisson(3))
    y = np.random.default_rng(4).integers(0, 5, (4, 3)).astype("float32")
    value = ours(params)
    np.testing.assert_allclose(value.log_prob(y), ref.log_prob(y), rtol=1e-5)
    np.testing.assert_allclose(value, ref.mean(), rtol=1e-5)
    restored = layers.MixtureSameFamily.from_config(ours.get_config())
    np.testing.assert_allclose(restored(params), value, rtol=1e-6)


def _targets(name, distribution, rng):
    """Targets in the support of the family, shaped like one sample."""
    shape = tuple(distribution.batch_shape) + tuple(distribution.event_shape)
    if name == "IndependentBernoulli":
        return rng.integers(0, 2, shape).astype("float32")
    if name == "IndependentPoisson":
        return rng.integers(0, 6, shape).astype("float32")
    if name == "OneHotCategorical":
        return np.eye(shape[-1], dtype="float32")[rng.integers(0, shape[-1], shape[:-1])]
    return rng.normal(size=shape).astype("float32")


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_distribution_as_tfp(name):
    ours, theirs, args, size_args = CASES[name]
    size = ours.params_size(*size_args)
    assert size == theirs.params_size(*size_args)
    rng = np.random.default_rng(7)
    params = rng.normal(size=(6, size)).astype("float32")
    layer = ours(*args, convert_to_tensor_fn="mean" if name != "OneHotCategorical" else "mode")
    value = layer(params)
    mine = distribution_of(value)
    ref = theirs.new(tf.constant(params), *args)
    y = _targets(name, ref, rng)
    np.testing.assert_allclose(mine.log_prob(y), ref.log_prob(y), rtol=1e-5, atol=1e-5)
    # The tensor forwards the distribution's methods (TFP's rv_y.log_prob(y)).
    np.testing.assert_allclose(value.log_prob(y), ref.log_prob(y), rtol=1e-5, atol=1e-5)
    if name != "OneHotCategorical":
        np.testing.assert_allclose(mine.mean(), ref.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, ref.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine.variance(), ref.variance(), rtol=1e-4, atol=1e-6)
    assert tuple(value.shape) == (6,) + tuple(ref.event_shape) + tuple(ref.batch_shape[1:])


def test_categorical_matches_tfd_categorical_on_integer_labels():
    logits = np.random.default_rng(1).normal(size=(5, 4)).astype("float32")
    labels = np.array([0, 3, 1, 2, 3])
    value = layers.Categorical(4, convert_to_tensor_fn="mode")(logits)
    np.testing.assert_array_equal(value, np.argmax(logits, -1))
    np.testing.assert_allclose(value.log_prob(labels),
                               tfd.Categorical(logits=logits).log_prob(labels), rtol=1e-6)
    assert layers.Categorical.params_size(4) == 4


def test_wrong_params_size_is_named():
    with pytest.raises(ValueError, match=r"params_size = 4 values.*Dense\(IndependentNormal"):
        layers.IndependentNormal(2)(np.zeros((3, 5), "float32"))


@pytest.mark.parametrize("bad", [0, -1, (2, 0), "a", 1.5])
def test_bad_event_shape(bad):
    with pytest.raises(ValueError, match="event_shape"):
        layers.IndependentNormal(bad)


def test_bad_convert_to_tensor_fn_and_seed():
    with pytest.raises(ValueError, match="convert_to_tensor_fn"):
        layers.IndependentNormal(1, convert_to_tensor_fn="median")
    with pytest.raises(ValueError, match="seed"):
        layers.IndependentNormal(1, seed=-3)
    with pytest.raises(ValueError, match="no mean"):
        layers.Categorical(3, convert_to_tensor_fn="mean")
    with pytest.raises(ValueError, match="make_distribution_fn"):
        layers.DistributionLambda()


def _regression_data(n=192, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    y = (x @ np.array([2.0, -1.0]) + 0.5 + 0.2 * rng.normal(size=n)).astype("float32")
    return x, y


def _normal_model(head=None, seed=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(2),
                             head or layers.IndependentNormal(1, seed=seed)])


def negloglik(y, rv_y):
    return -rv_y.log_prob(y)


def test_tfp_lambda_loss_and_our_loss_train_identically():
    """TFP's `lambda y, rv_y: -rv_y.log_prob(y)` works in compile and equals ours."""
    x, y = _regression_data()
    histories = []
    for loss in (negloglik, tfp_bnn.losses.NegativeLogLikelihood()):
        model = _normal_model()
        model.compile(keras.optimizers.Adam(0.05), loss=loss)
        histories.append(model.fit(x, y, epochs=3, batch_size=64, shuffle=False,
                                   verbose=0).history["loss"])
    assert histories[0] == histories[1]
    assert histories[0][-1] < histories[0][0]


def test_fit_evaluate_and_inspect_like_tfp():
    x, y = _regression_data()
    model = _normal_model()
    model.compile(keras.optimizers.Adam(0.05), loss=tfp_bnn.losses.NegativeLogLikelihood(),
                  metrics=["mae"])
    model.fit(x, y, epochs=150, batch_size=64, verbose=0)
    loss, mae = model.evaluate(x, y, verbose=0)
    yhat = model(x)
    # The noise is 0.2: the NLL of N(0, 0.2^2) is log(0.2 sqrt(2 pi e)) = -0.19.
    assert loss < 0.0
    np.testing.assert_allclose(yhat.mean()[:, 0], x @ np.array([2.0, -1.0]) + 0.5, atol=0.15)
    assert 0.1 < float(np.mean(yhat.stddev())) < 0.3
    # The value is a sample, so its error is about the noise; the mean's is smaller.
    assert mae > float(np.mean(np.abs(yhat.mean()[:, 0] - y)))


def test_saved_and_loaded_with_safe_mode(tmp_path):
    x, y = _regression_data(64)
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(layers.MixtureNormal.params_size(2, 1)),
                              layers.MixtureNormal(2, 1, convert_to_tensor_fn="mean")])
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded(x[:5]), model(x[:5]), rtol=1e-6)
    np.testing.assert_allclose(loaded(x[:5]).log_prob(y[:5, None]),
                               model(x[:5]).log_prob(y[:5, None]), rtol=1e-6)
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(model.evaluate(x, y, verbose=0))


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def laplace_head(t):
    return tfd.Laplace(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:]))


def test_distribution_lambda_with_registered_function_saves(tmp_path):
    model = _normal_model(layers.DistributionLambda(laplace_head, convert_to_tensor_fn="mode"))
    x, y = _regression_data(64)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(distribution_of(loaded(x[:3])), tfd.Laplace)
    np.testing.assert_allclose(loaded(x[:3]), model(x[:3]), rtol=1e-6)


def test_seeded_samples_are_reproducible():
    params = np.zeros((4, 2), "float32")
    a = layers.IndependentNormal(1, seed=11)
    b = layers.IndependentNormal(1, seed=11)
    np.testing.assert_array_equal(a(params), b(params))
    assert not np.array_equal(a(params), a(params))


def test_mixed_precision_head_computes_in_float32(mixed_float16):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2),
                              layers.IndependentNormal(1)])
    x, y = _regression_data(64)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    history = model.fit(x, y, epochs=2, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))
    assert model.layers[-1].compute_dtype == "float32"
    assert distribution_of(model(x[:2])).dtype == tf.float32


def test_output_of_a_later_operation_is_refused():
    value = layers.IndependentNormal(1)(np.zeros((3, 2), "float32"))
    with pytest.raises(ValueError, match="carries no distribution"):
        distribution_of(value + 1.0)
    with pytest.raises(ValueError, match="carries no distribution"):
        tfp_bnn.losses.NegativeLogLikelihood()(np.zeros((3, 1)), np.zeros((3, 1), "float32"))

"""The variational Dense family (`BayesianDenseBase`) on every supported Keras backend.

Each test runs unchanged on TensorFlow and on JAX (`KERAS_BACKEND=jax`): Keras'
own `run_layer_test`, a Flipout MLP that learns with `fit`, the KL entering
the loss once per step (eagerly, and inside the compiled `fit` and
`evaluate` steps), seeded reproducibility, mean mode, the Monte Carlo KL
against the closed form, and the `.keras` round trip with `safe_mode=True`.
"""

import keras
import numpy as np
import pytest
from keras.src import testing

import tfp_bnn
from tfp_bnn import layers
from tfp_bnn import priors
from tfp_bnn._substrate import tfd

pytestmark = pytest.mark.jax

DENSE = [layers.DenseReparameterization, layers.DenseFlipout,
         layers.DenseLocalReparameterization]
# Every Dense family member; DenseVariational with its closed-form KL (its
# default is TFP's Monte Carlo estimate).
ALL = DENSE + [layers.DenseVariational]
KL_WEIGHT = 0.1


def _make(cls, units, **kwargs):
    if cls is layers.DenseVariational:
        estimator = kwargs.pop("kl_estimator", "analytic")
        kwargs.setdefault("kl_use_exact", estimator == "analytic")
    return cls(units, **kwargs)


def _means(layer):
    """The posterior means of the kernel and the bias, as NumPy arrays."""
    loc = keras.ops.convert_to_numpy(layer.kernel_params[0])
    if isinstance(layer, layers.DenseVariational):  # one vector [kernel, bias]
        kernel, bias = layer._joint.split(loc)
        return keras.ops.convert_to_numpy(kernel), keras.ops.convert_to_numpy(bias)
    return loc, keras.ops.convert_to_numpy(layer.bias)


def _ids(classes):
    return [pytest.param(cls, id=cls.__name__) for cls in classes]


def _softplus(x):
    return np.logaddexp(0.0, x)


def _analytic_kl(layer):
    """KL(N(loc, softplus(rho)^2) || N(0, 1)) summed over the kernel, in NumPy.

    DenseVariational's posterior is over [kernel, bias] jointly: its KL too.
    """
    loc = keras.ops.convert_to_numpy(layer.kernel_params[0]).astype("float64")
    scale = _softplus(keras.ops.convert_to_numpy(layer.kernel_params[1]).astype("float64"))
    return float(np.sum(0.5 * (scale**2 + loc**2 - 1.0) - np.log(scale)))


def _regression_data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    w = np.array([[1.5], [-2.0], [0.5], [1.0]], "float32")
    y = x @ w + 0.1 * rng.normal(size=(n, 1)).astype("float32")
    return x, y


def _zero_data_loss(y_true, y_pred):
    # The model's loss is then its KL terms alone.
    return 0.0 * keras.ops.mean(y_pred, axis=-1)


@pytest.mark.parametrize("cls", _ids(ALL))
def test_keras_run_layer_test(cls):
    # Kernel loc and rho plus a point bias; kl_weight and the sampling switch;
    # one seed generator (and on JAX the KL tracker's total and count, which
    # the compiled steps carry there); one KL loss.
    # DenseVariational: one loc and one rho over [kernel, bias].
    state = 3 + (2 if keras.backend.backend() == "jax" else 0)
    testing.TestCase().run_layer_test(
        cls, {"units": 3, "kl_weight": KL_WEIGHT, "seed": 0}, input_shape=(2, 4),
        expected_output_shape=(2, 3),
        expected_num_trainable_weights=2 if cls is layers.DenseVariational else 3,
        expected_num_non_trainable_weights=2, expected_num_non_trainable_variables=state,
        expected_num_seed_generators=1, expected_num_losses=1, supports_masking=True,
        run_training_check=True, run_mixed_precision_check=True)


@pytest.mark.parametrize("cls", _ids(ALL))
def test_posterior_and_prior_are_substrate_distributions(cls):
    layer = _make(cls, 3, kl_weight=KL_WEIGHT, seed=0)
    layer(np.ones((2, 4), "float32"))
    assert isinstance(layer.kernel_posterior, tfd.Distribution)
    assert isinstance(layer.kernel_prior, tfd.Distribution)
    shape = (15,) if cls is layers.DenseVariational else (4, 3)
    assert tuple(layer.kernel_posterior.event_shape) == shape
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.kernel_posterior.mean()),
                               keras.ops.convert_to_numpy(layer.kernel_params[0]))


def test_flipout_mlp_learns_with_fit():
    x, y = _regression_data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((4,)),
        layers.DenseFlipout(16, activation="relu", kl_weight=1 / len(x), seed=1),
        layers.DenseFlipout(1, kl_weight=1 / len(x), seed=2),
    ])
    model.compile(keras.optimizers.Adam(0.02), "mse")
    before = model.evaluate(x, y, verbose=0)
    history = model.fit(x, y, epochs=30, batch_size=32, verbose=0).history["loss"]
    after = model.evaluate(x, y, verbose=0)
    assert np.all(np.isfinite(history))
    # Var(y) = 7.5: a model that learned the linear map ends well below it,
    # an untrained one near it (or above).
    assert history[-1] < 0.25 * history[0]
    assert after < 0.25 * before
    predictions = model.predict(x[:8], verbose=0)
    assert predictions.shape == (8, 1)


@pytest.mark.parametrize("cls", _ids(ALL))
def test_kl_enters_the_loss_once_per_step_for_a_shared_layer(cls):
    layer = _make(cls, 4, kl_weight=KL_WEIGHT, seed=3)
    inputs = keras.Input((4,))
    outputs = layer(layer(inputs))  # called twice in one forward pass
    model = keras.Model(inputs, outputs)
    x = np.random.default_rng(1).normal(size=(16, 4)).astype("float32")
    expected = KL_WEIGHT * _analytic_kl(layer)
    # Eager call: one term.
    model(x, training=True)
    assert len(model.losses) == 1
    np.testing.assert_allclose(float(model.losses[0]), expected, rtol=1e-5)
    # The compiled steps of evaluate and fit (learning rate 0: weights unchanged).
    model.compile(keras.optimizers.SGD(0.0), _zero_data_loss)
    np.testing.assert_allclose(model.evaluate(x, x, batch_size=8, verbose=0), expected,
                               rtol=1e-5)
    history = model.fit(x, x, batch_size=8, epochs=1, verbose=0).history["loss"]
    np.testing.assert_allclose(history[-1], expected, rtol=1e-5)


@pytest.mark.parametrize("cls", _ids(ALL))
def test_kl_weight_variable_scales_the_loss_inside_fit(cls):
    layer = _make(cls, 2, kl_weight=KL_WEIGHT, seed=4)
    model = keras.Sequential([keras.Input((3,)), layer])
    model.compile(keras.optimizers.SGD(0.0), _zero_data_loss)
    x = np.ones((8, 3), "float32")
    first = model.fit(x, x[:, :2], batch_size=8, verbose=0).history["loss"][-1]
    layer.kl_weight.assign(2 * KL_WEIGHT)  # read at run time by the compiled step
    second = model.fit(x, x[:, :2], batch_size=8, verbose=0).history["loss"][-1]
    np.testing.assert_allclose(second, 2 * first, rtol=1e-5)


@pytest.mark.parametrize("cls", _ids(ALL))
def test_seeded_layers_give_identical_outputs(cls):
    x = np.random.default_rng(2).normal(size=(5, 4)).astype("float32")
    outputs = []
    for seed in (7, 7, 8):
        layer = _make(cls, 3, kl_weight=KL_WEIGHT, seed=seed)
        outputs.append([keras.ops.convert_to_numpy(layer(x)) for _ in range(2)])
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])
    assert not np.array_equal(outputs[0][0], outputs[0][1])  # a new draw per call
    assert not np.array_equal(outputs[0][0], outputs[2][0])  # another seed


@pytest.mark.parametrize("cls", _ids(ALL))
def test_mean_mode_is_deterministic_and_the_posterior_mean(cls):
    x = np.random.default_rng(3).normal(size=(6, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), _make(cls, 3, kl_weight=KL_WEIGHT, seed=5)])
    layer = model.layers[0]
    sampled = [model.predict(x, verbose=0) for _ in range(2)]
    assert not np.array_equal(*sampled)
    assert tfp_bnn.set_mean_mode(model) == 1
    means = [model.predict(x, verbose=0), keras.ops.convert_to_numpy(model(x))]
    kernel, bias = _means(layer)
    expected = x @ kernel + bias
    np.testing.assert_allclose(means[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(means[0], means[1])
    with tfp_bnn.mean_mode(model, enabled=False):
        assert not np.array_equal(model.predict(x, verbose=0), means[0])


@pytest.mark.parametrize("cls", _ids(ALL))
def test_monte_carlo_kl_is_unbiased(cls):
    layer = _make(cls, 3, kl_weight=KL_WEIGHT, kl_estimator="mc", seed=6,
                posterior=tfp_bnn.posteriors.MeanFieldNormal(rho_init=0.0))
    layer(np.ones((2, 4), "float32"))
    draws = np.array([float(layer.kl_divergence()) for _ in range(400)])
    # Mean of 400 one-sample estimates: within 4 standard errors of the closed form.
    tolerance = 4.0 * draws.std(ddof=1) / np.sqrt(len(draws))
    assert abs(draws.mean() - _analytic_kl(layer)) < tolerance
    assert draws.std() > 0.0


@pytest.mark.parametrize("cls", _ids(ALL))
def test_monte_carlo_kl_trains_with_a_scale_mixture_prior(cls):
    x, y = _regression_data(n=64, seed=4)
    model = keras.Sequential([
        keras.Input((4,)),
        _make(cls, 1, kl_weight=1 / len(x), kl_estimator="mc",
              prior=priors.ScaleMixturePrior(), seed=8)])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    history = model.fit(x, y, epochs=10, batch_size=16, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))
    assert history[-1] < history[0]


@pytest.mark.parametrize("cls", _ids(ALL))
def test_keras_file_round_trip(cls, tmp_path):
    x, y = _regression_data(n=32, seed=5)
    model = keras.Sequential([
        keras.Input((4,)),
        _make(cls, 8, activation="relu", kl_weight=1 / len(x), seed=9),
        _make(cls, 1, kl_weight=1 / len(x), seed=10),
    ])
    model.compile("adam", "mse")
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert [type(layer) for layer in loaded.layers] == [cls, cls]
    for saved, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(saved),
                                      keras.ops.convert_to_numpy(restored))
    tfp_bnn.set_mean_mode(model)
    tfp_bnn.set_mean_mode(loaded)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-6)

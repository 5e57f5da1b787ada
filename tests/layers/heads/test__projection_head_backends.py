"""MC dropout and the regression and classification heads on every backend.

The per-layer test files check each layer in depth on TensorFlow (some
through `tf.GradientTape`, Bayesian projections or SavedModel); these tests
check on the active backend, TensorFlow or JAX, what a user of the heads
relies on: Keras' own `run_layer_test`, training with `fit` (a jit-compiled
step on JAX), outputs equal to a NumPy computation, finite gradients, and
Monte Carlo draws that differ between calls and repeat with a seed.
"""

import math

import keras
import numpy as np
import pytest
from keras.src import testing

from tests.gradients import layer_value_and_gradients
from tfp_bnn import metrics
from tfp_bnn.layers import HeteroscedasticClassification
from tfp_bnn.layers import HeteroscedasticRegression
from tfp_bnn.layers import HomoscedasticNoise
from tfp_bnn.layers import MCDropout
from tfp_bnn.losses import GaussianNLL

pytestmark = pytest.mark.jax

SCCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _np(x):
    return keras.ops.convert_to_numpy(x)


# (class, init, input shape, output shape, trainable weights, non-trainable
# weights, seed generators, masking): the numbers of
# tests/integration/test_keras_conformance.py.
HARNESS = [
    (MCDropout, {"rate": 0.5, "seed": 0}, (2, 4), (2, 4), 0, 1, 1, True),
    (HomoscedasticNoise, {}, (2, 3), (2, 6), 1, 0, 0, False),
    (HeteroscedasticRegression, {"units": 2}, (2, 4), (2, 4), 2, 0, 0, False),
    (HeteroscedasticClassification, {"num_classes": 3, "num_samples": 4, "seed": 0},
     (2, 4), (2, 3), 2, 0, 1, False),
]


@pytest.mark.parametrize("case", HARNESS, ids=lambda case: case[0].__name__)
def test_keras_run_layer_test(case):
    cls, init, input_shape, output_shape, trainable, non_trainable, seeds, masking = case
    testing.TestCase().run_layer_test(
        cls, init, input_shape=input_shape, expected_output_shape=output_shape,
        expected_num_trainable_weights=trainable,
        expected_num_non_trainable_weights=non_trainable,
        expected_num_non_trainable_variables=non_trainable + seeds,
        expected_num_seed_generators=seeds, expected_num_losses=0, supports_masking=masking,
        run_training_check=True, run_mixed_precision_check=True)


def _regression_data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, size=(n, 3)).astype("float32")
    noise = (0.2 + 0.3 * np.abs(x[:, :1])) * rng.normal(size=(n, 1))
    y = (x @ np.float32([[1.0], [-1.0], [0.5]]) + noise).astype("float32")
    return x, y


def _fit_decreases(model, x, y, loss, epochs=8, **compile_kwargs):
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss=loss, **compile_kwargs)
    before = model.evaluate(x, y, verbose=0, return_dict=True)
    history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    after = model.evaluate(x, y, verbose=0, return_dict=True)
    assert np.all(np.isfinite(history.history["loss"]))
    return before, after


@pytest.mark.parametrize("head", ["heteroscedastic", "homoscedastic"])
def test_regression_heads_train_with_fit(head):
    x, y = _regression_data()
    keras.utils.set_random_seed(1)
    if head == "heteroscedastic":
        top = [HeteroscedasticRegression(1)]
    else:
        top = [keras.layers.Dense(1), HomoscedasticNoise()]
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(16, activation="relu"),
                              *top])
    before, after = _fit_decreases(model, x, y, GaussianNLL(),
                                   metrics=[metrics.MeanRMSE()])
    # The NLL starts above 1 (unit noise against targets of std ~ 1.5) and
    # the noise std is ~0.5: a fitted model is well below 1.
    assert after["loss"] < before["loss"] - 0.5, (before, after)
    assert after["mean_rmse"] < before["mean_rmse"]
    assert model.predict(x[:4], verbose=0).shape == (4, 2)


def test_classification_head_trains_with_fit_and_streaming_metrics():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(300, 4)).astype("float32")
    y = np.argmax(x[:, :3] + 0.3 * rng.normal(size=(300, 3)), axis=-1).astype("int32")
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                              HeteroscedasticClassification(3, num_samples=8, seed=3)])
    # The head returns log-probabilities: softmax of them is the probabilities.
    streaming = [metrics.NegativeLogLikelihood(from_logits=True),
                 metrics.BrierScore(from_logits=True),
                 metrics.ExpectedCalibrationError(from_logits=True)]
    before, after = _fit_decreases(model, x, y, SCCE, epochs=10, metrics=streaming)
    # log 3 = 1.10 is the NLL of a uniform guess; the labels are mostly
    # the arg max of the inputs, which a trained network reads.
    assert after["loss"] < min(before["loss"], math.log(3.0)) - 0.4, (before, after)
    assert after["brier"] < before["brier"]
    log_probs = model.predict(x[:5], verbose=0)
    np.testing.assert_allclose(np.exp(log_probs.astype(np.float64)).sum(-1), 1.0, atol=1e-5)


def test_mc_dropout_model_trains_with_fit():
    x, y = _regression_data(seed=3)
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(32, activation="relu"),
                              MCDropout(0.1, seed=4), keras.layers.Dense(1)])
    before, after = _fit_decreases(model, x, y, "mse")
    assert after["loss"] < 0.5 * before["loss"], (before, after)


def _dropout_model(seed, rate=0.5, width=64):
    keras.utils.set_random_seed(0)  # the same Dense weights for every seed
    return keras.Sequential([keras.Input((width,)), MCDropout(rate, seed=seed),
                             keras.layers.Dense(1, kernel_initializer="ones")])


def test_mc_dropout_predict_draws_new_masks_and_repeats_with_a_seed():
    x = np.ones((16, 64), "float32")
    model = _dropout_model(seed=5)
    first, second = model.predict(x, verbose=0), model.predict(x, verbose=0)
    # Each row sums its kept units times 2: Binomial(64, 1/2) * 2, never
    # equal across 16 rows and two calls unless the mask is frozen.
    assert not np.array_equal(first, second)
    assert len(np.unique(first)) > 1
    again = _dropout_model(seed=5)
    np.testing.assert_array_equal(again.predict(x, verbose=0), first)
    np.testing.assert_array_equal(again.predict(x, verbose=0), second)
    assert not np.array_equal(_dropout_model(seed=6).predict(x, verbose=0), first)


def test_mc_dropout_keeps_units_at_the_rate_with_the_inverted_scale():
    rate, n = 0.3, 200 * 64
    layer = MCDropout(rate, seed=7)
    out = _np(layer(np.ones((200, 64), "float32")))
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1.0 / (1.0 - rate), rtol=1e-6)
    # Dropped fraction within 5 standard errors of the rate.
    assert abs(1.0 - kept.mean() - rate) < 5.0 * math.sqrt(rate * (1 - rate) / n)


def _softplus(x):
    return np.logaddexp(0.0, x)


def test_heteroscedastic_regression_output_is_the_numpy_parameterization():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(6, 3)).astype("float32")
    head = HeteroscedasticRegression(2, max_log_variance=2.0)
    head.build((None, 3))
    kernel = rng.normal(size=(3, 4)).astype("float32")
    bias = rng.normal(size=4).astype("float32")
    head.projection_layer.set_weights([kernel, bias])
    raw = x.astype(np.float64) @ kernel + bias
    # "scale": sigma = 1e-3 + softplus(r), s = 2 log sigma, softly capped at 2.
    s = 2.0 * np.log(1e-3 + _softplus(raw[:, 2:]))
    s = 2.0 - _softplus(2.0 - s)
    np.testing.assert_allclose(_np(head(x)), np.concatenate([raw[:, :2], s], -1), rtol=1e-5,
                               atol=1e-6)


def test_heteroscedastic_classification_without_noise_is_the_log_softmax():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6, 3)).astype("float32")
    head = HeteroscedasticClassification(4, num_samples=3, seed=0)
    head.build((None, 3))
    kernel = np.concatenate([rng.normal(size=(3, 4)), np.zeros((3, 4))], -1).astype("float32")
    # s = -60: the logit noise has std exp(-30) ~ 1e-13, far below float32 resolution.
    bias = np.concatenate([rng.normal(size=4), np.full(4, -60.0)]).astype("float32")
    head.projection_layer.set_weights([kernel, bias])
    logits = x.astype(np.float64) @ kernel[:, :4] + bias[:4]
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(_np(head(x)), log_softmax, rtol=1e-5, atol=1e-6)


def test_heteroscedastic_classification_draws_differ_and_repeat_with_a_seed():
    x = np.zeros((4, 3), "float32")

    def head(seed):
        layer = HeteroscedasticClassification(3, num_samples=2, seed=seed,
                                              bias_initializer="ones")
        layer.build((None, 3))
        return layer

    first = head(8)
    one, two = _np(first(x)), _np(first(x))
    # Identical rows, unit logit variance: only the noise tells them apart.
    assert len(np.unique(one[:, 0])) == 4 and not np.array_equal(one, two)
    again = head(8)
    np.testing.assert_array_equal(_np(again(x)), one)
    np.testing.assert_array_equal(_np(again(x)), two)
    assert not np.array_equal(_np(head(9)(x)), one)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
def test_heads_have_finite_gradients_at_extreme_log_variances(log_var):
    x = np.ones((8, 3), "float32")
    y_class = np.arange(8) % 3
    y_reg = np.linspace(-1e3, 1e3, 8).astype("float32")
    classifier = HeteroscedasticClassification(3, num_samples=4, seed=0,
                                               bias_initializer=keras.initializers.Constant(
                                                   log_var))
    regressor = HeteroscedasticRegression(1, parameterization="log_variance",
                                          bias_initializer=keras.initializers.Constant(log_var))
    for layer, loss_fn in ((classifier, lambda out: SCCE(y_class, out)),
                           (regressor, lambda out: GaussianNLL()(y_reg, out))):
        layer.build((None, 3))
        value, grads = layer_value_and_gradients(layer, loss_fn, x)
        assert np.isfinite(value), (layer.name, value)
        for grad in grads:
            assert np.all(np.isfinite(grad)) and np.any(grad != 0), (layer.name, grad)

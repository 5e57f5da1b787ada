"""Tests of the heteroscedastic classification head (Kendall and Gal 2017, sec. 3.3)."""

import math
import os

import keras
import numpy as np
import pytest
from tests.gradients import value_and_gradients
import tfp_bnn
from tfp_bnn import priors
from tfp_bnn.layers.heads.heteroscedastic_classification import HeteroscedasticClassification

pytestmark = pytest.mark.jax

SCCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _moment_head(num_classes, num_samples, seed=0):
    """A head whose inputs are its logit moments [f, s] (identity projection)."""
    head = HeteroscedasticClassification(num_classes, num_samples=num_samples, seed=seed,
                                         kernel_initializer="identity")
    head.build((None, 2 * num_classes))
    return head


def _stateless(head):
    """head's call as a function of (inputs, *trainable weights), at the current seed state.

    Every call with the same state draws the same logit noise, so a gradient
    and the outputs it belongs to come from separate calls.
    """
    state = [v.value for v in head.non_trainable_variables]

    def call(inputs, *trainable):
        return head.stateless_call(list(trainable), state, inputs)[0]

    return call


def _numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)


def _log_softmax(f):
    f = np.asarray(f, np.float64)
    shifted = f - f.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _entropy(p):
    p = np.asarray(p, np.float64)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)


def _binary_moments(d, tau):
    """E and Var of sigmoid(d + tau z), z ~ N(0, 1), by quadrature on a fine grid.

    For two classes softmax(u)_0 = sigmoid(u_0 - u_1), and u_0 - u_1 ~
    N(f_0 - f_1, sigma_0^2 + sigma_1^2). The grid (step 1e-4 on |z| <= 12)
    is exact to ~1e-8 here, far below the Monte Carlo errors compared.
    """
    z = np.linspace(-12.0, 12.0, 240_001)
    weights = np.exp(-0.5 * z**2)
    weights /= weights.sum()
    g = 1.0 / (1.0 + np.exp(-(np.asarray(d)[:, None] + np.asarray(tau)[:, None] * z)))
    mean = g @ weights
    return mean, (g**2) @ weights - mean**2


@pytest.mark.parametrize("return_logit_moments", [False, True])
@pytest.mark.parametrize("input_shape", [(5, 4), (2, 3, 4)])
def test_output_shapes(input_shape, return_logit_moments):
    head = HeteroscedasticClassification(3, num_samples=7,
                                         return_logit_moments=return_logit_moments)
    symbolic = head(keras.Input(input_shape[1:], batch_size=input_shape[0]))
    width = 6 if return_logit_moments else 3
    expected = (*input_shape[:-1], width)
    assert tuple(symbolic.shape) == expected == head.compute_output_shape(input_shape)
    x = _x(input_shape)
    out = _numpy(head(x))
    assert out.shape == expected
    if return_logit_moments:
        np.testing.assert_array_equal(out, _numpy(head.projection_layer(x)))


def test_outputs_are_log_probabilities_and_the_documented_loss():
    head = HeteroscedasticClassification(5, num_samples=20, seed=1,
                                         bias_initializer=keras.initializers.Constant(0.5))
    x = _x((64, 6), 1) * 3.0
    out = _numpy(head(x))
    assert np.all(out <= 1e-6)
    np.testing.assert_allclose(np.exp(out.astype(np.float64)).sum(-1), 1.0, atol=1e-5)
    # softmax(log p) = p, so cross entropy "from logits" is -log p_y.
    y = np.random.default_rng(2).integers(0, 5, size=64)
    np.testing.assert_allclose(float(SCCE(y, out)), -np.mean(out[np.arange(64), y]),
                               rtol=1e-5)


def test_vanishing_variance_gives_log_softmax_of_the_mean_logits():
    f = _x((16, 4), 3) * 4.0
    head = _moment_head(4, num_samples=10)
    out = _numpy(head(np.concatenate([f, np.full_like(f, -50.0)], -1)))
    np.testing.assert_allclose(out, _log_softmax(f), atol=2e-6)


def test_calls_draw_fresh_seeded_noise():
    moments = np.float32([[1.0, -0.5, 0.0, 0.0]])
    a, b = _moment_head(2, 5, seed=7), _moment_head(2, 5, seed=7)
    first, second = _numpy(a(moments)), _numpy(a(moments))
    assert not np.allclose(first, second)
    np.testing.assert_array_equal(_numpy(b(moments)), first)
    # Inference draws noise too: training=False changes nothing.
    np.testing.assert_array_equal(_numpy(b(moments, training=False)), second)


def test_binary_monte_carlo_average_matches_the_integral():
    """Each output is a mean of T i.i.d. draws of sigmoid(d + tau z): within 5 SE."""
    num_samples = 400
    f0 = np.float32([0.0, 2.0, -1.0, 5.0, 0.3, -3.0])
    f1 = np.float32([0.0, 0.0, 1.0, -2.0, 0.0, 0.5])
    s0 = np.float32([0.0, 1.0, 2.0, -1.0, 3.0, 4.0])
    s1 = np.float32([-2.0, 0.5, 2.0, 1.0, -9.0, 0.0])
    head = _moment_head(2, num_samples, seed=11)
    out = _numpy(head(np.stack([f0, f1, s0, s1], -1)))
    tau = np.sqrt(np.exp(s0.astype(np.float64)) + np.exp(s1.astype(np.float64)))
    mean, var = _binary_moments(f0.astype(np.float64) - f1, tau)
    standard_error = np.sqrt(var / num_samples)
    assert np.all(np.abs(np.exp(out[:, 0]) - mean) < 5 * standard_error + 1e-6)


def test_copies_stacked_on_the_batch_axis_are_independent_samples():
    """What a tiling Monte Carlo routine relies on: per-row noise.

    K copies of one input, averaged in probability space, estimate the same
    integral from K * T independent draws; with noise shared across the
    batch the error would stay at the T-draw level (here 20x larger).
    """
    copies, num_samples = 400, 25
    head = _moment_head(2, num_samples, seed=5)
    moments = np.tile(np.float32([[1.5, 0.0, 1.0, 0.0]]), (copies, 1))
    out = _numpy(head(moments))
    assert len(np.unique(out[:, 0])) == copies
    mean, var = _binary_moments(np.float64([1.5]), np.sqrt([math.e + 1.0]))
    estimate = np.exp(out[:, 0].astype(np.float64)).mean()
    assert abs(estimate - mean[0]) < 5 * math.sqrt(var[0] / (copies * num_samples))


@pytest.mark.parametrize("d", [0.5, 1.0, 2.0, 4.0, 8.0])
def test_large_variance_flattens_two_class_probabilities(d):
    """For two classes E[sigmoid(d + tau z)] lies in [1/2, sigmoid(d)] for d > 0.

    (Pair z with -z: g = sigmoid - 1/2 is odd and concave on x > 0, so
    g(d + a) + g(d - a) <= 2 g(d).) Hence the averaged probabilities have
    at least the entropy of softmax(f). With tau = 3 the gap to sigmoid(d)
    exceeds 5 Monte Carlo standard errors at T = 2000 (checked below), so
    the layer's estimate must show it.
    """
    num_samples = 2000
    log_var = math.log(4.5)  # sigma^2 = 4.5 per class, tau^2 = 9
    head = _moment_head(2, num_samples, seed=3)
    out = _numpy(head(np.float32([[d, 0.0, log_var, log_var]])))[0]
    mean, var = _binary_moments(np.float64([d]), np.float64([3.0]))
    softmax_f = 1.0 / (1.0 + math.exp(-d))
    assert softmax_f - mean[0] > 5 * math.sqrt(var[0] / num_samples)
    assert _entropy(np.exp(out)) > _entropy([softmax_f, 1.0 - softmax_f])


def test_very_large_equal_variance_tends_to_uniform():
    """With sigma >> spread of f the noise decides the class: nearly uniform."""
    f = np.float32([4.0, 1.0, 0.0, -1.0, -3.0])
    head = _moment_head(5, num_samples=2000, seed=4)
    out = _numpy(head(np.concatenate([f, np.full(5, 2 * math.log(100.0), "float32")])[None]))
    assert _entropy(np.exp(out[0])) > 0.97 * math.log(5)
    assert _entropy(np.exp(_log_softmax(f))) < 0.5 * math.log(5)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
def test_extreme_logits_and_variances_are_finite_with_finite_gradients(log_var):
    f = np.float32([[1e3, -1e3, 0.0], [-1e3, 999.0, 1e3], [1e3, 1e3, -1e3]])
    moments = np.concatenate([f, np.full_like(f, log_var)], -1)
    head = _moment_head(3, num_samples=50, seed=2)
    y = np.int64([1, 0, 2])
    call, weights = _stateless(head), [v.value for v in head.trainable_variables]
    loss, grads = value_and_gradients(lambda *args: SCCE(y, call(*args)), moments, *weights)
    out = _numpy(call(moments, *weights))
    assert np.all(np.isfinite(out)) and np.isfinite(float(loss))
    np.testing.assert_allclose(np.exp(out.astype(np.float64)).sum(-1), 1.0, atol=1e-5)
    # Finite, not informative: at s = +-50 the exact gradient to s is ~0
    # (sigma * eps ~ 1e11 makes every draw one-hot, or draws do not move f).
    for grad in grads:
        assert np.all(np.isfinite(grad))


def test_noise_helps_misclassified_and_hurts_confident_correct_examples():
    """The sign of d loss / d s that makes the loss learn aleatoric noise.

    f = [3, 0]: for label 0 more noise lowers E[softmax]_0 (loss grows with
    s); for label 1 it raises E[softmax]_1 (loss falls). Exact derivatives
    (both classes' s moved together, s = 0) are +0.047 and -0.47; over 20
    seeds the T = 1000 estimates have standard deviations 0.003 and 0.012.
    """
    head = _moment_head(2, num_samples=1000, seed=6)
    x = np.float32([[3.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    call, weights = _stateless(head), [v.value for v in head.trainable_variables]

    def loss(inputs):
        out = call(inputs, *weights)
        return -(out[0, 0] + out[1, 1])  # labels 0 and 1

    _, (grad,) = value_and_gradients(loss, x)
    grad_s = grad[:, 2:].sum(-1)
    assert grad_s[0] > 0.02 and grad_s[1] < -0.3, grad_s


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_changes_weights(jit_compile):
    head = HeteroscedasticClassification(3, num_samples=16, seed=0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              head])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SCCE, jit_compile=jit_compile)
    x = _x((32, 4), 5)
    y = np.random.default_rng(6).integers(0, 3, size=32)
    before = [v.numpy().copy() for v in model.trainable_variables]
    state = head.seed_generator.state.numpy().copy()
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    for old, var in zip(before, model.trainable_variables):
        assert not np.array_equal(old, var.numpy()), f"{var.path} did not change"
    assert not np.array_equal(state, head.seed_generator.state.numpy())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_classes": 3},
        {"num_classes": 4, "num_samples": 5, "seed": 2, "return_logit_moments": True,
         "kernel_initializer": keras.initializers.RandomNormal(stddev=0.1, seed=1),
         "name": "head"},
        {"num_classes": 2, "projection": "flipout", "kl_weight": 0.01,
         "prior": priors.ScaleMixturePrior(0.5, 1.0, 0.01)},
        {"num_classes": 2, "projection": "reparameterization", "bayesian_bias": True},
    ],
    ids=["dense", "dense_options", "flipout_prior", "reparam"],
)
def test_config_round_trip(kwargs):
    head = HeteroscedasticClassification(**kwargs)
    config = head.get_config()
    clone = HeteroscedasticClassification.from_config(config)
    assert clone.get_config() == config
    assert clone.projection_layer.get_config() == head.projection_layer.get_config()


@pytest.mark.parametrize("projection", ["dense",
                                        "flipout"])
def test_keras_file_round_trip(projection, tmp_path):
    extra = {"kl_weight": 1e-3} if projection == "flipout" else {}
    head = HeteroscedasticClassification(3, num_samples=8, projection=projection, seed=9,
                                         **extra)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              head])
    x = _x((10, 4), 7)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SCCE)
    model.fit(x, np.arange(10) % 3, batch_size=10, epochs=1, verbose=0)
    if projection == "flipout":
        tfp_bnn.set_mean_mode(model)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    loaded_head = loaded.layers[-1]
    assert isinstance(loaded_head, HeteroscedasticClassification)
    # Keras saves no random-generator state: a loaded head restarts from `seed`.
    fresh = keras.random.SeedGenerator(9).state.numpy()
    np.testing.assert_array_equal(loaded_head.seed_generator.state.numpy(), fresh)
    head.seed_generator.state.assign(fresh)
    np.testing.assert_array_equal(_numpy(loaded(x)), _numpy(model(x)))


def test_flipout_kl_appears_once_in_the_model_losses():
    kl_weight = 0.02
    head = HeteroscedasticClassification(3, num_samples=4, projection="flipout",
                                         kl_weight=kl_weight, seed=1)
    model = keras.Sequential([keras.Input((4,)), head])
    model(_x((6, 4), 8))
    assert len(model.losses) == 1
    expected = kl_weight * float(head.projection_layer.kl_divergence())  # analytic
    assert expected > 0
    np.testing.assert_allclose(float(model.losses[0]), expected, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_classes": 1}, "num_classes"),
        ({"num_classes": 2.0}, "num_classes"),
        ({"num_classes": True}, "num_classes"),
        ({"num_classes": 3, "num_samples": 0}, "num_samples"),
        ({"num_classes": 3, "num_samples": 10.5}, "num_samples"),
        ({"num_classes": 3, "projection": "gaussian"}, "projection"),
        ({"num_classes": 3, "seed": -1}, "seed"),
        ({"num_classes": 3, "seed": 1.5}, "seed"),
        ({"num_classes": 3, "return_logit_moments": "yes"}, "return_logit_moments"),
        ({"num_classes": 3, "units": 6}, "units"),
        ({"num_classes": 3, "activation": "softmax"}, "activation"),
        ({"num_classes": 3, "kl_weight": 0.1}, "kl_weight"),  # keras Dense has none
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, argument):
    with pytest.raises(ValueError, match=argument) as info:
        HeteroscedasticClassification(**kwargs)
    value = kwargs[argument]
    assert repr(value) in str(info.value) or str(value) in str(info.value)

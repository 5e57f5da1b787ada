"""Tests of the heteroscedastic regression head (Kendall and Gal 2017; seed 004, eqs. 64-66)."""

import math
import os

import keras
import numpy as np
import pytest

from tests.gradients import layer_value_and_gradients
import tfp_bnn
from tfp_bnn import priors
from tfp_bnn.layers.heads.heteroscedastic_regression import HeteroscedasticRegression
from tfp_bnn.layers.heads.heteroscedastic_regression import split_mean_log_variance
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import gaussian_nll

pytestmark = pytest.mark.jax


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _model(head, features=3):
    return keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(8, activation="tanh"), head]
    )


@pytest.mark.parametrize("units", [1, 3])
@pytest.mark.parametrize("input_shape", [(5, 4), (2, 3, 4)])
def test_output_shape_and_layout(units, input_shape):
    head = HeteroscedasticRegression(units, parameterization="log_variance")
    symbolic = head(keras.Input(input_shape[1:], batch_size=input_shape[0]))
    expected = (*input_shape[:-1], 2 * units)
    assert tuple(symbolic.shape) == expected == head.compute_output_shape(input_shape)
    x = _x(input_shape)
    out = keras.ops.convert_to_numpy(head(x))
    assert out.shape == expected
    # Unbounded: the head is its projection, means first, log variances after.
    raw = keras.ops.convert_to_numpy(head.projection_layer(x))
    np.testing.assert_array_equal(out, raw)
    mean, log_var = split_mean_log_variance(out)
    np.testing.assert_array_equal(mean, raw[..., :units])
    np.testing.assert_array_equal(log_var, raw[..., units:])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"units": 2},
        {"units": 1, "min_log_variance": -6.0, "max_log_variance": 3,
         "kernel_initializer": keras.initializers.RandomNormal(stddev=0.1, seed=1),
         "use_bias": False, "name": "head"},
        {"units": 1, "projection": "flipout", "kl_weight": 0.01,
         "prior": priors.ScaleMixturePrior(0.5, 1.0, 0.01), "seed": 4,
         "max_log_variance": 2.0},
        {"units": 2, "projection": "reparameterization", "bayesian_bias": True,
         "min_log_variance": -10.0},
    ],
    ids=["dense", "dense_bounded_initializer", "flipout_prior", "reparam_min"],
)
def test_config_round_trip(kwargs):
    head = HeteroscedasticRegression(**kwargs)
    config = head.get_config()
    clone = HeteroscedasticRegression.from_config(config)
    assert clone.get_config() == config
    assert clone.projection_layer.get_config() == head.projection_layer.get_config()
    if "prior" in kwargs:
        assert clone.projection_layer.prior == kwargs["prior"]


def _fit_one_step(model, x, y):
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for old, var in zip(before, model.trainable_variables):
        assert not np.array_equal(old, var.numpy()), f"{var.path} did not change"


@pytest.mark.parametrize("projection", ["dense",
                                        "flipout"])
def test_fit_step_then_keras_file_round_trip(projection, tmp_path):
    extra = {"kl_weight": 1e-3, "seed": 3} if projection == "flipout" else {}
    model = _model(HeteroscedasticRegression(1, projection=projection,
                                             min_log_variance=-8.0, **extra))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=GaussianNLL())
    x, y = _x((16, 3), 1), _x((16, 1), 2)
    _fit_one_step(model, x, y)
    if projection == "flipout":
        assert tfp_bnn.set_mean_mode(model) == 1
    expected = model.predict(x, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], HeteroscedasticRegression)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), expected)


def test_flipout_kl_reaches_the_model_losses_and_the_fitted_objective():
    kl_weight = 0.05
    head = HeteroscedasticRegression(1, projection="flipout", kl_weight=kl_weight, seed=0)
    model = _model(head)
    x, y = _x((32, 3), 3), _x((32, 1), 4)
    model(x)
    assert len(model.losses) == 1
    # N(0, 1) prior: the KL is analytic, so the term is deterministic.
    expected_kl = kl_weight * float(head.projection_layer.kl_divergence())
    assert expected_kl > 0
    np.testing.assert_allclose(float(model.losses[0]), expected_kl, rtol=1e-5)
    # The compiled objective is mean NLL + the KL term (mean mode: fixed weights).
    tfp_bnn.set_mean_mode(model)
    model.compile(loss=GaussianNLL())
    nll = float(GaussianNLL()(y, model(x)))
    evaluated = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    np.testing.assert_allclose(evaluated["loss"], nll + expected_kl, rtol=1e-5)


def test_learns_noise_that_grows_with_abs_x():
    """y = x + eps * (0.1 + |x|): sigma is 0.1 at x = 0 and 2.1 at |x| = 2.

    A homoscedastic fit would give sigma(2) / sigma(0) = 1; the truth is 21.
    With 512 points (~40 per unit of x) a sigma estimate from one unit
    interval has a relative standard error ~ 1 / sqrt(2 * 40) ~ 11%, and a
    2 x 32 tanh net smooths the kink of |x| at 0, which inflates sigma(0)
    (measured ~0.2). So: sigma(+-2) within a third of 2.1, ratio above 4.
    """
    rng = np.random.default_rng(0)
    n = 512
    x = rng.uniform(-3.0, 3.0, size=(n, 1)).astype("float32")
    y = (x[:, 0] + rng.normal(size=n) * (0.1 + np.abs(x[:, 0]))).astype("float32")
    model = keras.Sequential([
        keras.Input((1,)),
        keras.layers.Dense(32, activation="tanh"),
        keras.layers.Dense(32, activation="tanh"),
        HeteroscedasticRegression(1),
    ])
    model.compile(optimizer=keras.optimizers.Adam(2e-2), loss=GaussianNLL(),
                  jit_compile=True)
    # 400 Adam steps in one epoch: Keras's per-epoch overhead dominates otherwise.
    model.fit(np.tile(x, (200, 1)), np.tile(y, 200), batch_size=256, epochs=1,
              shuffle=False, verbose=0)
    out = model.predict(np.float32([[-2.0], [0.0], [2.0]]), verbose=0)
    sigma = np.exp(0.5 * out[:, 1])
    assert np.all(np.abs(sigma[[0, 2]] - 2.1) < 0.7), sigma
    assert min(sigma[0], sigma[2]) > 4.0 * sigma[1], sigma


@pytest.mark.parametrize(
    "low, high", [(-4.0, 2.0), (-4.0, None), (None, 2.0)], ids=["both", "min", "max"]
)
def test_bounds_keep_log_variance_inside(low, high):
    head = HeteroscedasticRegression(1, min_log_variance=low, max_log_variance=high,
                                     kernel_initializer="ones", parameterization="log_variance")
    x = np.float32([[-1e4], [-30.0], [-0.5], [0.0], [0.7], [30.0], [1e4]])
    out = keras.ops.convert_to_numpy(head(x))
    raw = x[:, 0]  # kernel 1, bias 0: the raw log variance is x
    s = out[:, 1]
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out[:, 0], raw)  # means are not bounded
    if low is not None:
        assert np.all(s >= low)
        assert s[0] == pytest.approx(low, abs=1e-6)
    if high is not None:
        assert np.all(s <= high)
        assert s[-1] == pytest.approx(high, abs=1e-6)
    # The documented maps, in float64, where float32 resolves them.
    r = raw[1:-1].astype(np.float64)
    softplus = np.logaddexp(0.0, r)
    if low is not None and high is not None:
        expected = low + (high - low) / (1.0 + np.exp(-r))
    elif low is not None:
        expected = low + softplus
    else:
        expected = high - np.logaddexp(0.0, -r)
    np.testing.assert_allclose(s[1:-1], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
def test_extreme_log_variance_gives_finite_loss_and_gradients(log_var):
    head = HeteroscedasticRegression(1, kernel_initializer="zeros",
                                     parameterization="log_variance")
    head.build((None, 2))
    head.projection_layer.bias.assign([0.0, log_var])
    x, y = _x((8, 2), 5), _x((8, 1), 6) * 3.0
    loss, grads = layer_value_and_gradients(head, lambda out: GaussianNLL()(y, out), x)
    assert np.isfinite(float(loss))
    # At s = -50 the NLL is ~ 0.5 exp(50) (y - mean)^2: large but float32.
    assert float(loss) > (1e20 if log_var < 0 else 20.0)
    for grad in grads:
        assert np.all(np.isfinite(grad))
        assert np.any(grad != 0)


def test_gaussian_nll_applies_per_output_to_the_stacked_split():
    units = 3
    head = HeteroscedasticRegression(units)
    x, y = _x((6, 4), 7), _x((6, units), 8)
    out = keras.ops.convert_to_numpy(head(x)).astype(np.float64)
    mean, log_var = split_mean_log_variance(out)
    nll = keras.ops.convert_to_numpy(gaussian_nll(y, np.stack([mean, log_var], axis=-1)))
    assert nll.shape == (6, units)
    expected = (0.5 * math.log(2 * math.pi) + 0.5 * log_var
                + 0.5 * (y - mean) ** 2 * np.exp(-log_var))
    np.testing.assert_allclose(nll, expected, rtol=1e-6)
    # For one output the head's own layout is what GaussianNLL takes.
    single = HeteroscedasticRegression(1)
    out1 = keras.ops.convert_to_numpy(single(x))
    np.testing.assert_allclose(
        float(GaussianNLL()(y[:, :1], out1)),
        np.mean(gaussian_nll(y[:, 0], np.stack(split_mean_log_variance(out1), -1)[:, 0])),
        rtol=1e-6,
    )


def test_split_rejects_an_odd_last_axis():
    with pytest.raises(ValueError, match="even"):
        split_mean_log_variance(np.zeros((2, 3), "float32"))


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"units": 0}, "units"),
        ({"units": -2}, "units"),
        ({"units": 1.5}, "units"),
        ({"units": True}, "units"),
        ({"units": 1, "projection": "conv"}, "projection"),
        ({"units": 1, "min_log_variance": 2.0, "max_log_variance": 2.0},
         "min_log_variance"),
        ({"units": 1, "min_log_variance": 3.0, "max_log_variance": -1.0},
         "max_log_variance"),
        ({"units": 1, "min_log_variance": float("-inf")}, "min_log_variance"),
        ({"units": 1, "max_log_variance": float("nan")}, "max_log_variance"),
        ({"units": 1, "max_log_variance": "5"}, "max_log_variance"),
        ({"units": 1, "activation": "relu"}, "activation"),
        ({"units": 1, "seed": 3}, "seed"),  # keras Dense takes no seed
        ({"units": 1, "projection": "flipout", "kl_weight": -1.0}, "kl_weight"),
        ({"units": 1, "parameterization": "softplus"}, "parameterization"),
        ({"units": 1, "min_log_variance": -150.0}, "min_log_variance"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, argument):
    with pytest.raises(ValueError, match=argument) as info:
        HeteroscedasticRegression(**kwargs)
    value = kwargs.get(argument)
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        assert repr(value) in str(info.value) or str(value) in str(info.value)


# -- the "scale" parameterization (the default) ---------------------------------

def _softplus64(r):
    return np.logaddexp(0.0, np.asarray(r, np.float64))


@pytest.mark.parametrize("low, high", [(None, None), (-8.0, None), (None, 3.0)],
                         ids=["default", "min", "max"])
def test_scale_parameterization_is_the_documented_map_and_finite(low, high):
    head = HeteroscedasticRegression(1, min_log_variance=low, max_log_variance=high)
    head.build((None, 1))
    # Kernel [1, 0] after build (the noise column starts at 0); set it to [1, 1]
    # so that the raw values are x itself.
    head.projection_layer.kernel.assign([[1.0, 1.0]])
    x = np.float32([[-3e38], [-1e4], [-30.0], [-0.5], [0.0], [0.7], [30.0], [1e4], [3e38]])
    out = keras.ops.convert_to_numpy(head(x))
    assert np.all(np.isfinite(out[1:-1])) and not np.any(np.isnan(out))
    np.testing.assert_array_equal(out[:, 0], x[:, 0])
    floor = 1e-3 if low is None else math.exp(low / 2)
    s = 2.0 * np.log(floor + _softplus64(x[1:-1, 0]))
    if high is not None:
        s = high - _softplus64(high - s)
    np.testing.assert_allclose(out[1:-1, 1], s, rtol=1e-5, atol=1e-5)
    assert np.all(out[:, 1] >= 2.0 * math.log(floor) - 1e-5)
    if high is not None:
        assert np.all(out[:, 1] <= high)


@pytest.mark.parametrize("projection", ["dense", "flipout"])
def test_noise_columns_start_at_zero_only_for_the_scale_parameterization(projection):
    def kernel(head):
        head.build((None, 4))
        layer = head.projection_layer
        return (layer.kernel if projection == "dense" else layer.kernel_params[0]).numpy()

    scale = kernel(HeteroscedasticRegression(2, projection=projection))
    assert np.all(scale[:, 2:] == 0) and np.all(scale[:, :2] != 0)
    raw = kernel(HeteroscedasticRegression(2, projection=projection,
                                           parameterization="log_variance"))
    assert np.all(raw != 0)


def test_configs_without_parameterization_load_as_log_variance():
    head = HeteroscedasticRegression(1)
    config = head.get_config()
    assert config["parameterization"] == "scale"
    del config["parameterization"]  # as written before the argument existed
    assert HeteroscedasticRegression.from_config(config).parameterization == "log_variance"


@pytest.fixture(scope="module")
def raw_concrete():
    """The concrete table unstandardized: inputs up to ~1100, targets ~2-83 MPa."""
    from tfp_bnn.data.uci import load_concrete  # noqa: PLC0415

    x, y = load_concrete()
    assert x.max() > 1000 and y.max() > 80
    return x, y


@pytest.mark.parametrize("projection", ["dense",
                                        "flipout"])
def test_trains_on_unstandardized_data_without_nan(raw_concrete, projection):
    """Raw concrete, as tutorials feed it; s = r (the old default) overflowed here.

    The first epoch starts with residuals of hundreds against sigma ~ 0.7;
    after it the NLL must fall every epoch (Adam, lr 1e-3, seeded).
    """
    x, y = raw_concrete
    keras.utils.set_random_seed(0)
    extra = {"kl_weight": 1.0 / len(x), "seed": 1} if projection == "flipout" else {}
    head = HeteroscedasticRegression(1, projection=projection, **extra)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(50, activation="relu"),
                              head])
    model.compile(keras.optimizers.Adam(1e-3), GaussianNLL(),
                  metrics=[tfp_bnn.metrics.MeanRMSE()])
    history = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history
    loss = np.array(history["loss"])
    assert np.all(np.isfinite(loss)), loss
    assert loss[-1] < loss[0], loss
    out = model.predict(x, verbose=0)
    assert np.all(np.isfinite(out))
    if projection == "dense":
        assert np.all(np.diff(loss) < 0), loss
        # A Gaussian of the targets' own spread (std 16.7) has NLL ~ 4.2.
        assert loss[-1] < 10.0, loss


def test_mixed_float16_head_is_finite_for_large_finite_inputs(mixed_float16):
    head = HeteroscedasticRegression(1, kernel_initializer="ones")
    x = np.full((4, 64), 6e4, "float16")  # finite in float16; sums are 3.8e6
    out = head(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    out = keras.ops.convert_to_numpy(out)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[:, 0], 64 * 6e4, rtol=1e-3)
    y = np.full((4, 1), 100.0, "float32")
    loss, grads = layer_value_and_gradients(head, lambda out: GaussianNLL()(y, out), x)
    assert np.isfinite(float(loss))
    assert all(np.all(np.isfinite(g)) for g in grads)
    # What the head avoids: a float16 projection of the same features overflows.
    plain = keras.layers.Dense(2, kernel_initializer="ones")
    assert not np.all(np.isfinite(keras.ops.convert_to_numpy(plain(x))))

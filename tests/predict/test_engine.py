"""Monte Carlo prediction without a Python loop, checked against closed forms.

A linear layer with Gaussian weights has an analytic predictive: for
y_j = sum_i x_i W_ij + b_j with W_ij ~ N(mu_ij, sigma_ij^2),

    E[y_j] = x @ mu[:, j] + b_j,   Var[y_j] = sum_i x_i^2 sigma_ij^2 (+ sigma_bj^2).

Tolerances come from the sample size T: the mean of T draws has standard
error sqrt(Var / T) and the sample variance has relative standard error
sqrt(2 / (T - 1)) for Gaussian draws; the tests allow 5 standard errors.
"""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import MCDropout
from tfp_bnn.posteriors import mean_field
from tfp_bnn.predict import engine
from tfp_bnn.predict import limits

T = 4000
DENSE = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]


def _softplus_inverse(sigma):
    return np.log(np.expm1(sigma))


def _linear_model(cls, in_dim=3, units=2, bayesian_bias=False, seed=1):
    layer = cls(units, kl_weight=0.0, bayesian_bias=bayesian_bias, seed=seed)
    model = keras.Sequential([keras.Input((in_dim,)), layer])
    rng = np.random.default_rng(seed)
    loc = rng.normal(size=(in_dim, units)).astype("float32")
    sigma = rng.uniform(0.2, 1.0, size=(in_dim, units)).astype("float32")
    layer.kernel_params[0].assign(loc)
    layer.kernel_params[1].assign(_softplus_inverse(sigma))
    bias_loc = np.array([0.5, -1.0][:units], "float32")
    bias_sigma = np.zeros(units, "float32")
    if bayesian_bias:
        bias_sigma = np.array([0.3, 0.6][:units], "float32")
        layer.bias_params[0].assign(bias_loc)
        layer.bias_params[1].assign(_softplus_inverse(bias_sigma))
    else:
        layer.bias.assign(bias_loc)
    return model, loc, sigma, bias_loc, bias_sigma


def _inputs(n=6, in_dim=3):
    return np.random.default_rng(7).normal(size=(n, in_dim)).astype("float32")


def _assert_moments(samples, mean, variance, num_samples):
    est_mean = samples.mean(axis=0)
    est_var = samples.var(axis=0, ddof=1)
    np.testing.assert_array_less(np.abs(est_mean - mean), 5 * np.sqrt(variance / num_samples))
    np.testing.assert_array_less(np.abs(est_var - variance),
                                 5 * variance * np.sqrt(2 / (num_samples - 1)))


@pytest.mark.jax
@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
@pytest.mark.parametrize("bayesian_bias", [False, True], ids=["bias", "bayesian_bias"])
def test_dense_predictive_matches_closed_form(cls, bayesian_bias):
    model, loc, sigma, b_loc, b_sigma = _linear_model(cls, bayesian_bias=bayesian_bias)
    x = _inputs()
    samples = tfp_bnn.predict.sample(model, x, num_samples=T, samples_per_call=1000)
    assert samples.shape == (T, 6, 2)
    mean = x @ loc + b_loc
    variance = np.square(x) @ np.square(sigma) + np.square(b_sigma)
    _assert_moments(samples.astype(np.float64), mean, variance, T)


@pytest.mark.parametrize("cls", [Conv2DReparameterization, Conv2DFlipout],
                         ids=lambda c: c.__name__)
@pytest.mark.jax
def test_conv_predictive_matches_closed_form(cls):
    layer = cls(2, 3, kl_weight=0.0, seed=3)
    model = keras.Sequential([keras.Input((4, 4, 2)), layer])
    rng = np.random.default_rng(3)
    loc = rng.normal(size=(3, 3, 2, 2)).astype("float32")
    sigma = rng.uniform(0.2, 0.8, size=(3, 3, 2, 2)).astype("float32")
    layer.kernel_params[0].assign(loc)
    layer.kernel_params[1].assign(_softplus_inverse(sigma))
    layer.bias.assign(np.array([0.1, -0.2], "float32"))
    x = rng.normal(size=(3, 4, 4, 2)).astype("float32")
    num_samples = 2000
    samples = tfp_bnn.predict.sample(model, x, num_samples=num_samples)
    assert samples.shape == (num_samples, 3, 2, 2, 2)
    conv = lambda inputs, kernel: tf.nn.conv2d(inputs, kernel, 1, "VALID").numpy()  # noqa: E731
    mean = conv(x, loc) + np.array([0.1, -0.2])
    variance = conv(np.square(x), np.square(sigma))
    _assert_moments(samples.astype(np.float64), mean, variance, num_samples)


@pytest.mark.parametrize("cls", [DenseReparameterization, DenseFlipout],
                         ids=lambda c: c.__name__)
@pytest.mark.jax
def test_one_network_per_sample_across_input_chunks(cls):
    """Sample t is one network for every input: y(2x) = 2 y(x) without bias."""
    layer = cls(2, use_bias=False, kl_weight=0.0, seed=0)
    model = keras.Sequential([keras.Input((3,)), layer])
    x = _inputs(n=8)
    x[7] = 2 * x[0]  # index 7 lands in another input chunk than index 0
    samples = tfp_bnn.predict.sample(model, x, num_samples=20, batch_size=3,
                                     samples_per_call=7)
    np.testing.assert_allclose(samples[:, 7], 2 * samples[:, 0], rtol=1e-5, atol=1e-5)
    # ... and different samples are different networks.
    assert np.all(np.abs(np.diff(samples[:, 0, 0])) > 0)


@pytest.mark.jax
def test_samples_are_uncorrelated_across_t():
    model, *_ = _linear_model(DenseFlipout)
    samples = tfp_bnn.predict.sample(model, _inputs(n=1), num_samples=T)[:, 0, 0]
    centred = samples - samples.mean()
    lag1 = np.sum(centred[1:] * centred[:-1]) / np.sum(centred * centred)
    assert abs(lag1) < 5 / np.sqrt(T)  # standard error of a null autocorrelation


class _CallCounter(keras.layers.Layer):
    """Identity layer counting how often Python runs its call (traces included)."""

    calls = 0

    def call(self, inputs):
        _CallCounter.calls += 1
        return inputs


@pytest.mark.jax
def test_no_python_loop_over_samples():
    _CallCounter.calls = 0
    model = keras.Sequential([keras.Input((3,)), _CallCounter(), DenseFlipout(2, kl_weight=0.0)])
    _CallCounter.calls = 0
    tfp_bnn.predict.sample(model, _inputs(), num_samples=100)
    tfp_bnn.predict.sample(model, _inputs(), num_samples=100)
    # One trace serves both predictions of 100 samples each.
    assert _CallCounter.calls == 1


def test_mc_dropout_predictive_matches_closed_form():
    """y = sum_i w_i x_i m_i / (1 - p), m_i ~ Bernoulli(1 - p): Var = p/(1-p) sum w^2 x^2."""
    rate = 0.3
    dense = keras.layers.Dense(1, use_bias=False)
    model = keras.Sequential([keras.Input((4,)), MCDropout(rate, seed=2), dense])
    w = np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    dense.kernel.assign(w)
    x = _inputs(n=5, in_dim=4)
    samples = tfp_bnn.predict.sample(model, x, num_samples=T).astype(np.float64)
    mean = x @ w
    variance = rate / (1 - rate) * (np.square(x) @ np.square(w))
    # Dropout sums are not Gaussian, so the sample variance's standard error is
    # sqrt((mu4 - Var^2) / T) with the exact 4th central moment of
    # y - E[y] = sum_i c_i u_i, c_i = w_i x_i, u_i = m_i / keep - 1 independent:
    # mu4 = sum_i c_i^4 E[u^4] + 3 (Var^2 - sum_i c_i^4 v^2), v = Var[u] = rate / keep,
    # E[u^4] = (1 - keep) ((1 - keep)^3 / keep^3 + 1).
    keep = 1 - rate
    c4 = np.sum(np.power(x * w[:, 0], 4), axis=1)
    v = rate / keep
    u4 = (1 - keep) * ((1 - keep) ** 3 / keep**3 + 1)
    mu4 = c4 * u4 + 3 * (np.square(variance[:, 0]) - c4 * v**2)
    se_var = np.sqrt((mu4 - np.square(variance[:, 0])) / T)
    est_mean = samples.mean(axis=0)[:, 0]
    est_var = samples.var(axis=0, ddof=1)[:, 0]
    np.testing.assert_array_less(np.abs(est_mean - mean[:, 0]), 5 * np.sqrt(variance[:, 0] / T))
    np.testing.assert_array_less(np.abs(est_var - variance[:, 0]), 5 * se_var)


def test_mean_mode_gives_equal_samples():
    model, loc, _, b_loc, _ = _linear_model(DenseFlipout)
    model.add(MCDropout(0.5))
    x = _inputs()
    with tfp_bnn.mean_mode(model):
        samples = tfp_bnn.predict.sample(model, x, num_samples=5)
    np.testing.assert_allclose(samples, np.broadcast_to(x @ loc + b_loc, samples.shape),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_rank3_inputs_and_multi_input_models():
    inputs = [keras.Input((2, 3)), keras.Input((2, 3))]
    merged = keras.layers.Concatenate()(inputs)
    hidden = DenseReparameterization(4, activation="relu", kl_weight=0.0, seed=0)(merged)
    outputs = {"a": DenseFlipout(1, kl_weight=0.0, seed=1)(hidden),
               "b": keras.layers.Dense(2)(hidden)}
    model = keras.Model(inputs, outputs)
    x = [np.ones((5, 2, 3), "float32"), np.zeros((5, 2, 3), "float32")]
    samples = tfp_bnn.predict.sample(model, x, num_samples=7, batch_size=2)
    assert samples["a"].shape == (7, 5, 2, 1)
    assert samples["b"].shape == (7, 5, 2, 2)
    # All five inputs are equal, so within one sample every input agrees.
    np.testing.assert_allclose(samples["a"], np.broadcast_to(samples["a"][:, :1],
                                                             samples["a"].shape), atol=1e-5)


@pytest.mark.jax
def test_seeded_layers_give_reproducible_predictions():
    x = _inputs()
    first = tfp_bnn.predict.sample(_linear_model(DenseFlipout, seed=4)[0], x, 10)
    second = tfp_bnn.predict.sample(_linear_model(DenseFlipout, seed=4)[0], x, 10)
    np.testing.assert_array_equal(first, second)


@pytest.mark.jax
def test_jit_compiled_calls_agree_in_distribution():
    model, loc, sigma, b_loc, _ = _linear_model(DenseReparameterization)
    x = _inputs()
    samples = tfp_bnn.predict.sample(model, x, num_samples=T, jit_compile=True)
    _assert_moments(samples.astype(np.float64), x @ loc + b_loc,
                    np.square(x) @ np.square(sigma), T)


@pytest.mark.jax
def test_inputs_of_different_lengths_are_refused():
    model, *_ = _linear_model(DenseFlipout)
    with pytest.raises(ValueError, match="same number of examples"):
        tfp_bnn.predict.sample(model, [np.zeros((2, 3)), np.zeros((3, 3))], 3)


@pytest.mark.jax
def test_chunks_are_yielded_for_any_sample_count():
    """O(1) memory however many calls (a list of 2**36 sizes filled 19 GB)."""
    chunks = limits.sample_chunks(2**40, 16)
    assert next(chunks) == 16
    assert sum(limits.sample_chunks(1000, 7)) == 1000
    assert max(limits.sample_chunks(1000, 7)) <= 7


@pytest.mark.jax
def test_huge_sample_counts_are_refused_before_any_work():
    model = keras.Sequential([keras.Input((2,)), tfp_bnn.layers.DenseFlipout(2, seed=0)])
    x = np.zeros((4, 2), "float32")
    for count in (2**40, 2**63):
        with pytest.raises(ValueError, match="an int in 1..1,000,000"):
            tfp_bnn.predict.sample(model, x, num_samples=count)
    with pytest.raises(ValueError, match="GiB, over half of this machine's memory"):
        limits.check_storage((10**6, 10**9), np.float64, "The sampled means")


@pytest.mark.jax
def test_chunks_yield_every_sample_of_every_input_once():
    model, *_ = _linear_model(DenseFlipout)

    plan = engine.prepare(model, _inputs(n=7), 10, batch_size=3, samples_per_call=4)
    chunks = engine.chunks(model, plan)
    assert not isinstance(chunks, (list, tuple))  # a generator: one chunk at a time
    seen = np.zeros((10, 7), int)
    for chunk in chunks:
        assert chunk.outputs.shape == (chunk.t1 - chunk.t0, chunk.n1 - chunk.n0, 2)
        assert chunk.t1 - chunk.t0 <= 4 and chunk.n1 - chunk.n0 <= 3
        seen[chunk.t0:chunk.t1, chunk.n0:chunk.n1] += 1
    np.testing.assert_array_equal(seen, 1)


@pytest.mark.parametrize("predict", [
    lambda m, x: tfp_bnn.predict.sample(m, x, 3),
    lambda m, x: tfp_bnn.predict.regression(m, x, 3),
    lambda m, x: tfp_bnn.predict.classification(m, x, 3),
], ids=["sample", "regression", "classification"])
@pytest.mark.jax
def test_inputs_are_checked_once_per_prediction(predict, monkeypatch):

    calls = []
    checked = engine.as_arrays
    monkeypatch.setattr(engine, "as_arrays", lambda *a, **k: calls.append(1) or checked(*a, **k))
    model, *_ = _linear_model(DenseFlipout)
    predict(model, _inputs())
    assert len(calls) == 1


@pytest.fixture
def tensorflow_warnings():
    """Lines TensorFlow's own logger writes during the test."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = tf.get_logger()
    # Warnings reach the handler whatever level a program set before (the
    # benchmark scripts set ERROR; without this, a check for no warning
    # would pass unheard).
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_predicting_with_many_models_does_not_warn_of_retracing(tensorflow_warnings):
    # One runner per model, each traced once: TensorFlow counts retraces per
    # code object and warns from the fifth, so counting every model's first
    # trace against one function would warn here (it did).
    x = np.ones((3, 2), "float32")
    for seed in range(7):
        model = keras.Sequential([keras.Input((2,)), DenseFlipout(2, seed=seed)])
        tfp_bnn.predict.classification(model, x, num_samples=2)
    assert not [line for line in tensorflow_warnings if "retracing" in line]

    # A real retrace of one runner still warns: six new sample counts, six traces.
    runner = engine.MonteCarloRunner(model)
    for num_samples in range(1, 7):
        runner.draw(num_samples)
    assert [line for line in tensorflow_warnings if "retracing" in line]


@pytest.mark.parametrize("units, compiled", [(4, False), (64, True)])
def test_draws_are_compiled_only_for_large_weights(units, compiled):
    # 8 x 4 weights: drawn op by op (Philox normals); 256 x 64 = FUSE_MIN_SIZE
    # weights: one XLA computation (ThreeFry uniforms through erfinv).
    inputs = 256 if compiled else 8
    assert (inputs * units >= mean_field.FUSE_MIN_SIZE) is compiled
    model = keras.Sequential([keras.Input((inputs,)), DenseReparameterization(units)])
    runner = engine.MonteCarloRunner(model)
    graph = runner.traced_draw.get_concrete_function(3).graph
    ops = {op.type for op in graph.get_operations()}
    assert ("StatelessRandomNormalV2" in ops) is not compiled, ops
    assert ("StatelessRandomUniformV2" in ops) is compiled, ops
    kernel = tf.nest.flatten(runner.draw(3))[0]
    assert kernel.shape == (3, inputs, units)

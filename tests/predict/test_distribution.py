"""Monte Carlo prediction for models whose output is a distribution layer's."""

import math

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import layers
from tfp_bnn._substrate import tfd as substrate_tfd
from tfp_bnn.distributions import value_of
from tfp_bnn.predict import DistributionPrediction
from tfp_bnn.predict import RegressionPrediction

T = 40


def _x(n=30, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, 3)).astype("float32")


def _model(head, width, bayesian=True, seed=5):
    keras.utils.set_random_seed(seed)
    dense = (layers.DenseFlipout(width, kernel_initializer="random_normal", seed=seed)
             if bayesian else keras.layers.Dense(width))
    return keras.Sequential([keras.Input((3,)), dense, head])


@pytest.fixture(scope="module")
def normal_model():
    model = _model(layers.IndependentNormal(1), 2)
    for layer in tfp_bnn.kl_layers(model):  # visible weight noise
        layer.kernel_params[1].assign(np.full(layer.kernel_params[1].shape, -1.0, "float32"))
    return model


@pytest.mark.jax
def test_normal_head_equals_the_gaussian_mixture(normal_model):
    """For a Normal family the exact predictive is RegressionPrediction's mixture."""
    x = _x()
    y = np.random.default_rng(1).normal(size=(30, 1))
    pred = tfp_bnn.predict.regression(normal_model, x, num_samples=T)  # output="auto"
    assert isinstance(pred, DistributionPrediction)
    gaussian = RegressionPrediction(pred.sample_means, pred.sample_variances)
    np.testing.assert_allclose(pred.log_likelihood(y), gaussian.log_likelihood(y), rtol=1e-6)
    np.testing.assert_allclose(pred.interval(0.9), gaussian.interval(0.9))
    assert np.all(pred.epistemic_variance > 0)
    # Each sample's mean and variance are those of its own distribution.
    dist = pred.sample_distributions[0][-1]
    assert dist.batch_shape[0] == (pred.sample_distributions[0][1]
                                   - pred.sample_distributions[0][0]) * 30


def test_same_draws_as_the_values_of_the_head(normal_model):
    """The per-sample means are what the model gives with convert_to_tensor_fn='mean'."""
    x = _x()
    mean_model = keras.Sequential([keras.Input((3,)), normal_model.layers[0],
                                   layers.IndependentNormal(1, convert_to_tensor_fn="mean")])
    with tfp_bnn.mean_mode(normal_model):
        pred = tfp_bnn.predict.distribution(normal_model, x, num_samples=3)
        np.testing.assert_allclose(pred.sample_means[0], value_of(mean_model(x)), rtol=1e-6)
    np.testing.assert_allclose(pred.epistemic_variance, 0.0, atol=1e-12)


def test_poisson_log_likelihood_is_exact():
    model = _model(layers.IndependentPoisson(1), 1)
    x = _x(12)
    counts = np.arange(12, dtype="float64")[:, None] % 5
    pred = tfp_bnn.predict.distribution(model, x, num_samples=T, samples_per_call=7)
    rates = pred.sample_means  # a Poisson's mean is its rate
    np.testing.assert_allclose(pred.sample_variances, rates, rtol=1e-6)
    log_p = counts * np.log(rates) - rates - np.vectorize(math.lgamma)(counts + 1)
    peak = log_p.max(0)
    expected = peak + np.log(np.mean(np.exp(log_p - peak), 0))
    np.testing.assert_allclose(pred.log_likelihood(counts), expected[:, 0], rtol=1e-5)


def test_interval_of_a_non_normal_family_from_draws():
    """A deterministic logistic head: the interval is the logistic's, within MC error."""
    model = _model(layers.IndependentLogistic(1), 2, bayesian=False)
    x = _x(8)
    pred = tfp_bnn.predict.distribution(model, x, num_samples=4)
    lower, upper = pred.interval(0.8)
    dist = tfp_bnn.distributions.distribution_of(model(x))
    exact_upper = np.asarray(dist.distribution.quantile(0.9))
    # 4000 draws: the 0.9 quantile's standard error is sqrt(0.9 * 0.1 / 4000) / f(q),
    # with the logistic density f(q) = 0.09 / s at that quantile.
    scale = np.asarray(dist.distribution.scale)
    se = math.sqrt(0.09 / 4000) / (0.09 / scale)
    assert np.all(np.abs(upper - exact_upper) < 5 * se)
    assert np.all(np.abs(lower - np.asarray(dist.distribution.quantile(0.1))) < 5 * se)


def _softmax(logits):
    logits = np.asarray(logits, np.float64)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


@pytest.mark.jax
def test_categorical_head_in_classification():
    model = _model(layers.Categorical(4), 4, bayesian=False)
    x = _x(10)
    pred = tfp_bnn.predict.classification(model, x, num_samples=3)  # output="auto"
    logits = model.layers[0](x)
    np.testing.assert_allclose(pred.probs, _softmax(logits), rtol=1e-5)
    np.testing.assert_allclose(pred.mutual_information, 0.0, atol=1e-6)


@pytest.mark.parametrize("head, width", [
    pytest.param(layers.OneHotCategorical(3), 3, id="one_hot"),
    pytest.param(layers.IndependentBernoulli(1), 1, id="bernoulli", marks=pytest.mark.jax)])
def test_one_hot_and_bernoulli_heads_in_classification(head, width):
    model = _model(head, width, bayesian=False)
    pred = tfp_bnn.predict.classification(model, _x(6), num_samples=2)
    logits = np.asarray(model.layers[0](_x(6)), np.float64)
    if width == 1:
        logits = np.concatenate([np.zeros_like(logits), logits], -1)
    np.testing.assert_allclose(pred.probs, _softmax(logits), rtol=1e-6)


@pytest.mark.jax
def test_a_parameter_every_sample_shares_keeps_its_axes():
    """A constant scale (one value for every sample and point) next to a sampled loc:
    on JAX the samples of a call are mapped, and the shared scale must not be stacked
    against the loc's axes. A Logistic: its interval comes from seeded draws."""
    model = keras.Sequential([
        layers.DenseFlipout(2, kernel_initializer="random_normal", seed=5),
        layers.DistributionLambda(
            lambda t: substrate_tfd.Independent(substrate_tfd.Logistic(t, 0.5), 1))])
    x, y = _x(5), np.random.default_rng(2).normal(size=(5, 2))
    model(x)  # built on concrete inputs
    pred = tfp_bnn.predict.distribution(model, x, num_samples=6, samples_per_call=3)
    np.testing.assert_allclose(pred.sample_variances, (math.pi * 0.5) ** 2 / 3, rtol=1e-6)
    assert np.all(pred.epistemic_variance > 0)
    # log p(y | w_t): the two outputs' logistic log-densities, summed.
    z = (y - pred.sample_means) / 0.5
    log_p = (-z - 2 * np.log1p(np.exp(-z)) - math.log(0.5)).sum(-1)
    np.testing.assert_allclose(pred.sample_log_prob(y), log_p, rtol=1e-5)
    # From 4,000 draws per point: the mixture's CDF there is 1/4 and 3/4 within
    # 5 standard errors of a quantile's coverage, 5 sqrt(1/4 3/4 / 4000) = 0.034.
    for bound, level in zip(pred.interval(0.5), (0.25, 0.75)):
        cdf = np.mean(1 / (1 + np.exp(-(bound - pred.sample_means) / 0.5)), axis=0)
        assert np.all(np.abs(cdf - level) < 0.034), (cdf, level)


def test_softmax_outputs_are_not_read_as_logits():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), layers.DenseFlipout(4, seed=1),
                              keras.layers.Dense(3, activation="softmax")])
    x = _x(20)
    labels = np.arange(20) % 3
    with pytest.raises(ValueError, match="applies softmax.*output='probabilities'"):
        tfp_bnn.predict.classification(model, x, num_samples=5, output="logits")
    with tfp_bnn.mean_mode(model):  # every sample the same network: exact comparison
        auto = tfp_bnn.predict.classification(model, x, num_samples=2)
        probs = model(x).numpy().astype(np.float64)
    # Read as probabilities, not as logits (softmax of probabilities is flatter).
    np.testing.assert_allclose(auto.probs, probs, rtol=1e-5)
    assert auto.nll(labels) == pytest.approx(
        -np.mean(np.log(probs[np.arange(20), labels])), rel=1e-5)
    # A custom layer that normalises is caught from its values.
    wrapped = keras.Sequential([keras.Input((3,)), layers.DenseFlipout(3, seed=1),
                                keras.layers.Activation("softmax")])
    with pytest.raises(ValueError, match="probabilities"):
        tfp_bnn.predict.classification(wrapped, x, num_samples=2, output="logits")


class SubclassedRegressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = layers.DenseFlipout(2, seed=0)
        self.head = layers.IndependentNormal(1)

    def call(self, x):
        return self.head(self.dense(x))


def test_subclassed_distribution_model_is_not_misread():
    model = SubclassedRegressor()
    model(_x(2))
    with pytest.raises(ValueError, match="distribution layer's.*tfp_bnn.predict.distribution"):
        tfp_bnn.predict.regression(model, _x(4), num_samples=2)
    pred = tfp_bnn.predict.distribution(model, _x(4), num_samples=2)
    assert pred.mean.shape == (4, 1)


def test_model_without_distribution_head_is_refused():
    model = keras.Sequential([keras.Input((3,)), layers.DenseFlipout(2, seed=0)])
    with pytest.raises(ValueError, match="carries no distribution"):
        tfp_bnn.predict.distribution(model, _x(4), num_samples=2)

"""The Monte Carlo engine on Keras' TensorFlow and JAX backends alike.

The models here are made of Keras layers only, so that the engine is checked on
both backends whatever the variational layers run on: a Dropout kept on at
inference (what Monte Carlo dropout does) and a layer adding seeded Gaussian
noise per row, each drawing from its own `keras.random.SeedGenerator`. Both act
row by row, which both backends' engines sample correctly (TensorFlow tiles the
inputs S times, JAX maps the call over S random states).

Summaries are checked against NumPy computations from the samples the engine
returns: a model whose random state (its generators' states) is reset to the same
values draws the same samples, on either backend.
"""

import math
import re

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import _backend
from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.predict import engine

try:  # jax is an extra; the floors' run has none
    from tfp_bnn.predict import _jax_runner
except ImportError:
    _jax_runner = None

pytestmark = pytest.mark.jax


class _KeptDropout(keras.layers.Dropout):
    """Dropout at inference too: masks drawn in every call, as Monte Carlo dropout."""

    def call(self, inputs, training=None):
        return super().call(inputs, training=True)


class _RowNoise(keras.layers.Layer):
    """Adds scale * N(0, 1) noise, drawn per row from the layer's own SeedGenerator."""

    def __init__(self, scale, seed, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs):
        noise = keras.random.normal(keras.ops.shape(inputs), seed=self.seed_generator)
        return inputs + self.scale * noise


def _stochastic_model(units=2, in_dim=3, seed=0):
    """Dense -> kept dropout -> Dense -> row noise, every weight and seed fixed by `seed`."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((in_dim,)),
        keras.layers.Dense(8, activation="tanh"),
        _KeptDropout(0.3, seed=seed + 1),
        keras.layers.Dense(units),
        _RowNoise(0.5, seed=seed + 2),
    ])


def _deterministic_model(units=3, in_dim=3, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((in_dim,)), keras.layers.Dense(6, activation="relu"),
                             keras.layers.Dense(units)])


def _rewound(model):
    """Runs `predict(model)` after resetting the model's random state to what it is now."""
    states = [(v, keras.ops.convert_to_numpy(v.value)) for v in model.non_trainable_variables]

    def predict(function, *args, **kwargs):
        for variable, value in states:
            variable.assign(value)
        return function(model, *args, **kwargs)

    return predict


def _inputs(n=7, in_dim=3):
    return np.random.default_rng(7).normal(size=(n, in_dim)).astype("float32")


@pytest.mark.parametrize("num_samples, batch_size, samples_per_call",
                         [(1, None, None), (10, 3, 4), (13, 7, 5), (5, 1, 1)])
def test_sample_counts_and_shapes(num_samples, batch_size, samples_per_call):
    samples = tfp_bnn.predict.sample(_stochastic_model(), _inputs(), num_samples=num_samples,
                                     batch_size=batch_size, samples_per_call=samples_per_call)
    assert samples.shape == (num_samples, 7, 2)
    assert samples.dtype == np.float32
    assert np.all(np.isfinite(samples))
    if num_samples > 1:  # every sample is a new draw: no two rows of samples repeat
        flat = samples.reshape(num_samples, -1)
        assert len(np.unique(flat, axis=0)) == num_samples


def test_multi_input_model_gives_samples_of_every_output():
    keras.utils.set_random_seed(3)
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    hidden = _KeptDropout(0.5, seed=4)(keras.layers.Concatenate()([a, b]))
    model = keras.Model({"a": a, "b": b}, [keras.layers.Dense(2)(hidden),
                                           keras.layers.Dense(1)(hidden)])
    x = {"a": _inputs(5, 3), "b": _inputs(5, 2)}
    first, second = tfp_bnn.predict.sample(model, x, num_samples=6, batch_size=2,
                                           samples_per_call=4)
    assert first.shape == (6, 5, 2) and second.shape == (6, 5, 1)


def test_chunking_samples_gives_the_one_chunk_result():
    x = _inputs()
    whole = tfp_bnn.predict.sample(_stochastic_model(), x, num_samples=400)
    chunked = tfp_bnn.predict.sample(_stochastic_model(), x, num_samples=400,
                                     samples_per_call=7)
    if _backend.is_jax():
        # Sample t's random state depends on t only, not on the chunk it falls in.
        np.testing.assert_array_equal(chunked, whole)
        return
    # TensorFlow draws each chunk's noise as it comes: the same distribution, other numbers.
    # Per-input means of 400 samples agree within 5 standard errors of their difference.
    spread = np.sqrt((whole.var(axis=0, ddof=1) + chunked.var(axis=0, ddof=1)) / 400)
    np.testing.assert_array_less(np.abs(whole.mean(axis=0) - chunked.mean(axis=0)), 5 * spread)


def test_seeded_models_repeat_their_samples_and_predictions_move_on():
    x = _inputs()
    model = _stochastic_model()
    first = tfp_bnn.predict.sample(model, x, num_samples=8, samples_per_call=3)
    again = tfp_bnn.predict.sample(_stochastic_model(), x, num_samples=8, samples_per_call=3)
    np.testing.assert_array_equal(again, first)
    # The same model's next prediction draws new samples; its random state rewound, the same.
    predict = _rewound(model)
    later = predict(tfp_bnn.predict.sample, x, num_samples=8, samples_per_call=3)
    assert not np.any(later == first)
    np.testing.assert_array_equal(predict(tfp_bnn.predict.sample, x, num_samples=8,
                                          samples_per_call=3), later)


def test_deterministic_model_samples_are_equal_with_zero_variance():
    model, x = _deterministic_model(), _inputs()
    samples = tfp_bnn.predict.sample(model, x, num_samples=5, samples_per_call=2)
    expected = keras.ops.convert_to_numpy(model(x))
    for sample in samples:
        np.testing.assert_allclose(sample, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(sample, samples[0])
    pred = tfp_bnn.predict.regression(model, x, num_samples=5, output="mean",
                                      noise_variance=0.25)
    np.testing.assert_array_equal(pred.epistemic_variance, 0.0)
    np.testing.assert_array_equal(pred.total_variance, 0.25)
    probs = tfp_bnn.predict.classification(model, x, num_samples=5, output="logits")
    # Identical samples: the predictive entropy is the expected one, up to float64 rounding.
    np.testing.assert_allclose(probs.mutual_information, 0.0, atol=1e-12)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_regression_summaries_equal_numpy_of_the_samples():
    x, y = _inputs(n=9), np.random.default_rng(1).normal(size=(9, 1))
    predict = _rewound(_stochastic_model())
    samples = predict(tfp_bnn.predict.sample, x, num_samples=50,
                      samples_per_call=20).astype(np.float64)
    pred = predict(tfp_bnn.predict.regression, x, num_samples=50, samples_per_call=20)
    means, variances = samples[..., :1], np.exp(samples[..., 1:])
    mean = means.mean(axis=0)
    np.testing.assert_allclose(pred.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(pred.epistemic_variance, means.var(axis=0), rtol=1e-9)
    np.testing.assert_allclose(pred.aleatoric_variance, variances.mean(axis=0), rtol=1e-12)
    summaries = pred.summaries()
    np.testing.assert_allclose(summaries["stddev"],
                               np.sqrt(means.var(axis=0) + variances.mean(axis=0)), rtol=1e-9)
    # log p(y) = log-mean-exp over the samples of log N(y | mu_t, sigma_t^2).
    log_densities = -0.5 * (math.log(2 * math.pi) + np.log(variances)
                            + np.square(y - means) / variances)[..., 0]
    peak = log_densities.max(axis=0)
    expected = peak + np.log(np.exp(log_densities - peak).mean(axis=0))
    np.testing.assert_allclose(pred.log_likelihood(y), expected, rtol=1e-10)
    # The interval's bounds are the mixture's quantiles: its CDF there is (1 -+ level) / 2.
    lower, upper = pred.interval(0.9)
    for bound, level in ((lower, 0.05), (upper, 0.95)):
        cdf = np.mean([[_normal_cdf((bound[n, 0] - means[t, n, 0]) / np.sqrt(variances[t, n, 0]))
                        for n in range(9)] for t in range(50)], axis=0)
        np.testing.assert_allclose(cdf, level, atol=1e-9)


def _normal_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def test_classification_summaries_equal_numpy_of_the_samples():
    x, labels = _inputs(n=9), np.arange(9) % 3
    predict = _rewound(_stochastic_model(units=3))
    samples = predict(tfp_bnn.predict.sample, x, num_samples=40,
                      samples_per_call=15).astype(np.float64)
    pred = predict(tfp_bnn.predict.classification, x, num_samples=40, samples_per_call=15,
                   keep_samples=True)
    probs = np.exp(_log_softmax(samples))
    np.testing.assert_allclose(pred.sample_probs, probs, rtol=1e-12)
    mean = probs.mean(axis=0)
    np.testing.assert_allclose(pred.probs, mean, rtol=1e-12)
    predictive = -(mean * np.log(mean)).sum(axis=-1)
    expected = -(probs * np.log(probs)).sum(axis=-1).mean(axis=0)
    np.testing.assert_allclose(pred.predictive_entropy, predictive, rtol=1e-10)
    np.testing.assert_allclose(pred.expected_entropy, expected, rtol=1e-10)
    np.testing.assert_allclose(pred.mutual_information, predictive - expected,
                               rtol=1e-8, atol=1e-14)
    assert np.all(pred.mutual_information > 0)  # the samples disagree: some epistemic part
    assert pred.nll(labels) == pytest.approx(-np.log(mean[np.arange(9), labels]).mean(),
                                             rel=1e-12)
    assert pred.accuracy(labels) == pytest.approx(np.mean(mean.argmax(-1) == labels))


@pytest.mark.parametrize("num_samples, shown", [
    (0, "0"), (-3, "-3"), (2.5, "2.5"), ("10", "'10'"), (True, "True"),
    (10**6 + 1, "1000001"), (2**63, str(2**63)),
])
def test_bad_sample_counts_give_one_line_errors_before_any_call(num_samples, shown):
    model = _stochastic_model()
    message = f"`num_samples` must be an int in 1..1,000,000, got {shown}."
    for predict in (tfp_bnn.predict.sample, tfp_bnn.predict.regression,
                    tfp_bnn.predict.classification):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            predict(model, _inputs(), num_samples=num_samples)
    assert model not in engine._RUNNERS
    assert _jax_runner is None or model not in _jax_runner._RUNNERS



class _TwoMembers(keras.layers.Layer):
    """Adds 10 * (t mod 2) to sample t, read from the sample tiles as a deep ensemble does."""

    samples_multiple = 2

    def call(self, inputs):
        context = sample_context()
        tiles = 1 if context is None else context.num_samples
        rows = keras.ops.shape(inputs)[0]
        member = keras.ops.cast(keras.ops.arange(rows) // (rows // tiles) % 2, inputs.dtype)
        # As a full [rows, units] tensor: TensorFlow's Keras reads a [rows, 1] addend as a bias.
        return inputs + 10.0 * member[:, None] * keras.ops.ones_like(inputs)


def test_samples_in_groups_of_a_multiple_meet_their_member():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), _TwoMembers()])
    x = _inputs()
    base = keras.ops.convert_to_numpy(model.layers[0](x))
    samples = tfp_bnn.predict.sample(model, x, num_samples=10, batch_size=4, samples_per_call=4)
    for t, sample in enumerate(samples):
        np.testing.assert_allclose(sample, base + 10.0 * (t % 2), rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="`num_samples` must be a multiple of 2 for this model"):
        tfp_bnn.predict.sample(model, x, num_samples=5)

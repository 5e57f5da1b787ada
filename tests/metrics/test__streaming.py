"""Tests of the streaming Keras metrics of tfp_bnn.metrics (`tfp_bnn/metrics/_streaming.py`):
each equals its NumPy score over the concatenated batches, inside compiled steps too.
"""

import keras
import numpy as np
import pytest

from tests.metrics.streaming_cases import fixed_classifier
from tfp_bnn import metrics
from tfp_bnn.metrics import BrierScore
from tfp_bnn.metrics import ExpectedCalibrationError
from tfp_bnn.metrics import NegativeLogLikelihood

pytestmark = pytest.mark.jax


def _random_batches(seed, num_batches=4, batch=37, num_classes=5):
    rng = np.random.default_rng(seed)
    n = num_batches * batch
    probs = rng.dirichlet(np.full(num_classes, 0.3), size=n).astype(np.float32)
    labels = rng.integers(0, num_classes, size=n)
    return labels, probs, [slice(i, i + batch) for i in range(0, n, batch)]


NUMPY_OF = {
    ExpectedCalibrationError: lambda y, p: metrics.expected_calibration_error(y, p, 7),
    NegativeLogLikelihood: metrics.negative_log_likelihood,
    BrierScore: metrics.brier_score,
}


def _make(cls, **kwargs):
    if cls is ExpectedCalibrationError:
        kwargs["num_bins"] = 7
    return cls(**kwargs)


@pytest.mark.parametrize("cls", list(NUMPY_OF))
def test_streaming_metric_equals_the_numpy_function_over_batches(cls):
    labels, probs, batches = _random_batches(0)
    metric = _make(cls)
    targets = [labels, labels[:, None], np.eye(5, dtype=np.float32)[labels], labels]
    for batch, y_true in zip(batches, targets):  # sparse, [b, 1] and one-hot targets
        metric.update_state(y_true[batch], probs[batch])
    expected = NUMPY_OF[cls](labels, probs)
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    metric.reset_state()
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("cls", list(NUMPY_OF))
def test_streaming_metric_with_sample_weights_equals_repeated_examples(cls):
    labels, probs, batches = _random_batches(1)
    weights = np.random.default_rng(1).integers(0, 4, size=len(labels))
    assert (weights == 0).any()
    expected = NUMPY_OF[cls](np.repeat(labels, weights), np.repeat(probs, weights, axis=0))
    for scale in (1.0, 0.25):  # a weighted mean does not depend on the weights' scale
        metric = _make(cls)
        for batch in batches:
            metric.update_state(labels[batch], probs[batch], sample_weight=scale * weights[batch])
        assert float(metric.result()) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    unweighted = NUMPY_OF[cls](labels, probs)
    assert abs(unweighted - expected) > 1e-3  # the weights matter in this case


@pytest.mark.parametrize("num_bins", [5, 10, 15])
def test_streaming_ece_bins_float32_confidences_at_the_edges_as_numpy_does(num_bins):
    # Confidences equal to each edge rounded to float32, and one float32 step
    # either side: the cases where float32 and float64 comparisons can differ.
    edges32 = np.linspace(0.0, 1.0, num_bins + 1).astype(np.float32)
    conf = np.concatenate(
        [edges32, np.nextafter(edges32, np.float32(0)), np.nextafter(edges32, np.float32(2))]
    )
    conf = np.unique(np.clip(conf, np.float32(0.5), np.float32(1.0)))
    probs = np.stack([conf, 1 - conf], axis=1).astype(np.float32)
    probs[:, 1] = np.float32(1) - probs[:, 0]
    labels = np.arange(len(conf)) % 2
    metric = ExpectedCalibrationError(num_bins=num_bins)
    metric.update_state(labels, probs)
    curve = metrics.reliability_curve(labels, probs, num_bins)
    np.testing.assert_array_equal(metric.bin_weight.numpy(), curve.counts)
    assert float(metric.result()) == pytest.approx(
        metrics.expected_calibration_error(labels, probs, num_bins), rel=1e-5, abs=1e-7
    )


@pytest.mark.parametrize("cls", list(NUMPY_OF))
def test_from_logits_applies_a_softmax(cls):
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=3.0, size=(50, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=50)
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    metric = _make(cls, from_logits=True)
    metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(NUMPY_OF[cls](labels, probs), rel=1e-5)


def test_from_logits_is_finite_for_logits_of_a_thousand():
    logits = np.array([[1e3, -1e3], [1e3, -1e3], [-1e3, 1e3]], np.float32)
    labels = np.array([1, 0, 1])
    nll = NegativeLogLikelihood(from_logits=True)
    nll.update_state(labels, logits)
    # log_softmax: -(-1e3 - 1e3) = 2000 for the first row, 0 for the others.
    assert float(nll.result()) == pytest.approx(2000.0 / 3, rel=1e-6)
    brier = BrierScore(from_logits=True)
    brier.update_state(labels, logits)
    assert float(brier.result()) == pytest.approx(2.0 / 3, rel=1e-6)
    ece = ExpectedCalibrationError(from_logits=True)
    ece.update_state(labels, logits)
    # All confidences 1.0 in the last bin, 2 of 3 correct: |2 - 3| / 3.
    assert float(ece.result()) == pytest.approx(1.0 / 3, rel=1e-6)
    # Logit gaps that overflow float32 give log p = -inf for the other class,
    # which must not turn into 0 * -inf = NaN for a correct prediction.
    huge = NegativeLogLikelihood(from_logits=True)
    huge.update_state([0], np.array([[3e38, -3e38]], np.float32))
    assert float(huge.result()) == 0.0


def test_streaming_nll_of_a_zero_probability_matches_numpy():
    probs = np.array([[1.0, 0.0], [0.5, 0.5]], np.float32)
    metric = NegativeLogLikelihood()
    metric.update_state([1, 0], probs)
    expected = metrics.negative_log_likelihood([1, 0], probs)
    assert float(metric.result()) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("from_logits", [False, True])
def test_metrics_in_compile_fit_and_evaluate(jit_compile, from_logits):
    model = fixed_classifier(from_logits)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(96, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=96)
    weights = rng.uniform(0.0, 2.0, size=96).astype(np.float32)
    model.compile(
        # Learning rate 0: the zero kernel of the side branch stays zero.
        optimizer=keras.optimizers.SGD(learning_rate=0.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits),
        metrics=[
            ExpectedCalibrationError(num_bins=6, from_logits=from_logits),
            NegativeLogLikelihood(from_logits=from_logits),
            BrierScore(from_logits=from_logits),
        ],
        # Keras hands sample weights only to `weighted_metrics`.
        weighted_metrics=[BrierScore(from_logits=from_logits, name="weighted_brier")],
        jit_compile=jit_compile,
    )
    assert model.jit_compile is jit_compile  # Keras did not fall back from XLA
    outputs = model.predict(x, batch_size=32, verbose=0).astype(np.float64)
    if from_logits:
        outputs = np.exp(outputs - outputs.max(axis=1, keepdims=True))
        outputs /= outputs.sum(axis=1, keepdims=True)
    expected = {
        "ece": metrics.expected_calibration_error(y, outputs, 6),
        "nll": metrics.negative_log_likelihood(y, outputs),
        "brier": metrics.brier_score(y, outputs),
    }
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    results = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    for name, value in expected.items():
        assert history.history[name][0] == pytest.approx(value, rel=1e-5), name
        assert results[name] == pytest.approx(value, rel=1e-5), name
    assert results["nll"] == pytest.approx(results["loss"], rel=1e-5)
    assert results["weighted_brier"] == pytest.approx(expected["brier"], rel=1e-5)
    # With sample weights: the weighted mean of the per-example Brier scores.
    per_example = np.sum((outputs - np.eye(3)[y]) ** 2, axis=1)
    weighted = model.evaluate(x, y, sample_weight=weights, batch_size=32, verbose=0,
                              return_dict=True)
    assert weighted["weighted_brier"] == pytest.approx(
        np.sum(weights * per_example) / np.sum(weights), rel=1e-5
    )
    assert weighted["brier"] == pytest.approx(expected["brier"], rel=1e-5)


@pytest.mark.parametrize("cls", list(NUMPY_OF))
def test_config_round_trip(cls):
    metric = _make(cls, from_logits=True, name="my_metric")
    config = metric.get_config()
    assert config["from_logits"] is True and config["name"] == "my_metric"
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(metric), safe_mode=True
    )
    assert type(restored) is cls
    assert restored.get_config() == config
    if cls is ExpectedCalibrationError:
        assert restored.num_bins == 7 and restored.bin_weight.shape == (7,)


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: ExpectedCalibrationError(num_bins=0), r"`num_bins` must be a positive int"),
        (lambda: ExpectedCalibrationError(num_bins="15"), r"`num_bins` must be a positive int"),
        (lambda: BrierScore(dtype="int32"), r"BrierScore needs dtype float32 or float64, got "
                                            r"'int32'"),
        (lambda: NegativeLogLikelihood(dtype="float16"), r"float32 or float64.*float16"),
        (lambda: NegativeLogLikelihood().update_state([0, 1], np.ones((2, 1))),
         r"NegativeLogLikelihood expects `y_pred` of shape \[batch, K\] with a known K >= 2"),
        (lambda: BrierScore().update_state([0], np.ones((1, 2, 2))),
         r"BrierScore expects `y_pred` of shape \[batch, K\].*\(1, 2, 2\)"),
        (lambda: ExpectedCalibrationError().update_state(np.zeros((2, 2, 1)),
                                                         np.full((2, 3), 1 / 3)),
         r"ExpectedCalibrationError expects sparse `y_true`.*\(2, 2, 1\)"),
        (lambda: BrierScore().update_state(np.zeros((2, 4)), np.full((2, 3), 1 / 3)),
         r"sparse `y_true`.*\(2, 4\)"),
    ],
)
def test_bad_streaming_metric_arguments(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()

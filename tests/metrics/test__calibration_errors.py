"""Tests of the adaptive and classwise calibration errors of tfp_bnn.metrics
(`tfp_bnn/metrics/_calibration_errors.py`): the NumPy functions against plain loops, and the
streaming `ClasswiseCalibrationError` against the NumPy function, inside compiled steps too.
"""

import keras
import numpy as np
import pytest

from tests.metrics.streaming_cases import fixed_classifier
from tfp_bnn import metrics
from tfp_bnn.metrics import ClasswiseCalibrationError

pytestmark = pytest.mark.jax


def _random_case(seed, n, num_classes=4, quantize=False):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(num_classes, 0.5), size=n)
    if quantize:  # eighths: values on the bin edges of 2, 4 and 8 bins, and many ties
        probs = np.array([rng.multinomial(8, row) for row in probs]) / 8
    # Labels drawn from the probabilities, sharpened: neither calibrated nor random.
    labels = np.array([rng.choice(num_classes, p=row) for row in
                       np.square(probs) / np.square(probs).sum(axis=1, keepdims=True)])
    return labels, probs


def _first_max(row):
    row = list(row)
    return row.index(max(row))


def _brute_force_ace(labels, probs, num_bins):
    n = len(labels)
    confidence = [max(row) for row in probs]
    ranked = sorted(range(n), key=lambda i: confidence[i])  # stable: lower index first
    total, start = 0.0, 0
    for b in range(num_bins):
        size = n // num_bins + (1 if b < n % num_bins else 0)
        members = ranked[start:start + size]
        start += size
        if not members:
            continue
        accuracy = sum(_first_max(probs[i]) == labels[i] for i in members) / size
        mean_confidence = sum(confidence[i] for i in members) / size
        total += size / n * abs(accuracy - mean_confidence)
    assert start == n
    return total


def _in_bin(value, b, num_bins):
    low, high = b / num_bins, (b + 1) / num_bins
    return low < value <= high or (b == 0 and value == 0.0)


def _brute_force_classwise(labels, probs, num_bins):
    n, num_classes = probs.shape
    total = 0.0
    for k in range(num_classes):
        for b in range(num_bins):
            members = [i for i in range(n) if _in_bin(probs[i][k], b, num_bins)]
            if members:
                frequency = sum(labels[i] == k for i in members) / len(members)
                mean_p = sum(probs[i][k] for i in members) / len(members)
                total += len(members) / n * abs(frequency - mean_p)
    return total / num_classes


@pytest.mark.parametrize(
    "n, num_bins, quantize",
    [(150, 15, False), (151, 15, False), (100, 7, True), (5, 8, False), (40, 1, False)],
)
def test_adaptive_calibration_error_equals_a_plain_loop(n, num_bins, quantize):
    labels, probs = _random_case(n + num_bins, n, quantize=quantize)
    value = metrics.adaptive_calibration_error(labels, probs, num_bins)
    assert isinstance(value, float)
    assert value == pytest.approx(_brute_force_ace(labels, probs, num_bins), abs=1e-12)


def test_adaptive_bins_hold_equal_numbers_of_examples():
    # Confidences .6, .7, .8, .9 and 4 bins of one: each gap is |correct - confidence|.
    labels = [0, 0, 1, 1]
    probs = [[0.6, 0.4], [0.9, 0.1], [0.3, 0.7], [0.2, 0.8]]
    expected = (0.4 + 0.1 + 0.3 + 0.2) / 4
    assert metrics.adaptive_calibration_error(labels, probs, 4) == pytest.approx(expected)
    # 2 bins: {.6, .7} and {.8, .9}, all right: (|2 - 1.3| + |2 - 1.7|) / 4.
    assert metrics.adaptive_calibration_error(labels, probs, 2) == pytest.approx(0.25)
    # One bin is the top-label ECE with one bin.
    assert metrics.adaptive_calibration_error(labels, probs, 1) == pytest.approx(
        metrics.expected_calibration_error(labels, probs, 1), abs=1e-15)


@pytest.mark.parametrize(
    "n, num_bins, quantize",
    [(120, 15, False), (90, 4, True), (60, 8, True), (7, 10, False), (50, 1, False)],
)
def test_classwise_calibration_error_equals_a_plain_loop(n, num_bins, quantize):
    labels, probs = _random_case(n * num_bins, n, quantize=quantize)
    value = metrics.classwise_calibration_error(labels, probs, num_bins)
    assert isinstance(value, float)
    assert value == pytest.approx(_brute_force_classwise(labels, probs, num_bins), abs=1e-12)


def test_classwise_error_of_two_classes_on_a_hand_computed_case():
    # Class 0: p = .75 twice in bin (.5, 1], 1 of 2 labels 0: |1 - 1.5| / 2 = .25.
    # Class 1: p = .25 twice in bin (0, .5],  1 of 2 labels 1: |1 - 0.5| / 2 = .25.
    value = metrics.classwise_calibration_error([0, 1], [[0.75, 0.25], [0.75, 0.25]], 2)
    assert value == pytest.approx(0.25, abs=1e-15)
    # A class never predicted still counts: K = 3, p_2 = 0 is in bin 0 and never the label.
    value = metrics.classwise_calibration_error([0, 1], [[0.75, 0.25, 0], [0.75, 0.25, 0]], 2)
    assert value == pytest.approx(0.5 / 3, abs=1e-15)


SCORERS = {
    "adaptive_calibration_error": metrics.adaptive_calibration_error,
    "classwise_calibration_error": metrics.classwise_calibration_error,
}
LABELS = np.array([0, 1, 2, 1])
PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]])


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize(
    "labels, probs, pattern",
    [
        (LABELS[:3], PROBS, r"`labels` has 3 examples but `probs` has 4"),
        (LABELS, PROBS[None], r"`probs` must have shape \[n, K\].*\(1, 4, 3\)"),
        (LABELS, np.where(PROBS == 0.8, np.nan, PROBS), r"`probs` must be finite.*row 1"),
        (LABELS, PROBS * 2, r"`probs` must lie in \[0, 1\]"),
        (LABELS, PROBS * 0.5, r"`probs` rows must sum to 1"),
        ([0, 1, 3, 1], PROBS, r"`labels` must lie in \[0, 3\).*got 3 at index 2"),
        ([0, -1, 2, 1], PROBS, r"`labels` must lie in \[0, 3\).*got -1 at index 1"),
        ([0, np.nan, 2, 1], PROBS, r"`labels` must be integer class ids"),
        ([[0, 1], [2, 1]], PROBS, r"`labels` must have shape \[n\] or \[n, 1\]"),
    ],
)
def test_bad_labels_and_probs(scorer, labels, probs, pattern):
    with pytest.raises(ValueError, match=pattern):
        SCORERS[scorer](labels, probs)


@pytest.mark.parametrize("scorer", sorted(SCORERS))
@pytest.mark.parametrize("num_bins", [0, -1, 1.5, "10", None, True])
def test_bad_num_bins(scorer, num_bins):
    with pytest.raises(ValueError, match=r"`num_bins` must be a positive int, got"):
        SCORERS[scorer](LABELS, PROBS, num_bins)


# The streaming metric.

def _batches(seed, num_batches=3, batch=41, num_classes=5):
    labels, probs = _random_case(seed, num_batches * batch, num_classes)
    return labels, probs.astype(np.float32), [slice(i, i + batch)
                                              for i in range(0, num_batches * batch, batch)]


def test_streaming_metric_equals_the_numpy_function_over_batches():
    labels, probs, batches = _batches(0)
    metric = ClasswiseCalibrationError(num_classes=5, num_bins=7)
    targets = [labels, labels[:, None], np.eye(5, dtype=np.float32)[labels]]
    for batch, y_true in zip(batches, targets):  # sparse, [b, 1] and one-hot targets
        metric.update_state(y_true[batch], probs[batch])
    expected = metrics.classwise_calibration_error(labels, probs, 7)
    assert expected > 0.02
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert float(keras.ops.sum(metric.bin_weight)) == 5 * len(labels)
    metric.reset_state()
    assert float(metric.result()) == 0.0
    assert float(keras.ops.sum(keras.ops.abs(metric.bin_confidence))) == 0.0


def test_streaming_metric_with_sample_weights_equals_repeated_examples():
    labels, probs, batches = _batches(1)
    weights = np.random.default_rng(1).integers(0, 4, size=len(labels))
    assert (weights == 0).any()
    expected = metrics.classwise_calibration_error(
        np.repeat(labels, weights), np.repeat(probs, weights, axis=0), 7)
    for scale in (1.0, 0.25):  # the result does not depend on the weights' scale
        metric = ClasswiseCalibrationError(num_classes=5, num_bins=7)
        for batch in batches:
            metric.update_state(labels[batch], probs[batch], sample_weight=scale * weights[batch])
        assert float(metric.result()) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert abs(metrics.classwise_calibration_error(labels, probs, 7) - expected) > 1e-3


@pytest.mark.parametrize("num_bins", [5, 10, 15])
def test_streaming_metric_bins_float32_probabilities_at_the_edges_as_numpy_does(num_bins):
    # Probabilities equal to each edge rounded to float32, and one float32 step
    # either side: the cases where float32 and float64 comparisons can differ.
    edges32 = np.linspace(0.0, 1.0, num_bins + 1).astype(np.float32)
    p = np.concatenate([edges32, np.nextafter(edges32, np.float32(0)),
                        np.nextafter(edges32, np.float32(2))])
    p = np.unique(np.clip(p, np.float32(0), np.float32(1)))
    probs = np.stack([p, np.float32(1) - p], axis=1).astype(np.float32)
    labels = np.arange(len(p)) % 2
    metric = ClasswiseCalibrationError(num_classes=2, num_bins=num_bins)
    metric.update_state(labels, probs)
    for k in range(2):
        counts = [sum(_in_bin(float(v), b, num_bins) for v in probs[:, k])
                  for b in range(num_bins)]
        np.testing.assert_array_equal(np.asarray(metric.bin_weight)[k], counts)
    assert float(metric.result()) == pytest.approx(
        metrics.classwise_calibration_error(labels, probs, num_bins), rel=1e-5, abs=1e-7)


def test_from_logits_applies_a_softmax():
    rng = np.random.default_rng(2)
    logits = rng.normal(scale=3.0, size=(50, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=50)
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    metric = ClasswiseCalibrationError(num_classes=4, from_logits=True)
    metric.update_state(labels, logits)
    assert float(metric.result()) == pytest.approx(
        metrics.classwise_calibration_error(labels, probs), rel=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("from_logits", [False, True])
def test_metric_in_compile_fit_and_evaluate(jit_compile, from_logits):
    model = fixed_classifier(from_logits)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(96, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=96)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits),
        metrics=[ClasswiseCalibrationError(num_classes=3, num_bins=6, from_logits=from_logits)],
        jit_compile=jit_compile,
    )
    assert model.jit_compile is jit_compile  # Keras did not fall back from XLA
    outputs = model.predict(x, batch_size=32, verbose=0).astype(np.float64)
    if from_logits:
        outputs = np.exp(outputs - outputs.max(axis=1, keepdims=True))
        outputs /= outputs.sum(axis=1, keepdims=True)
    expected = metrics.classwise_calibration_error(y, outputs, 6)
    assert expected > 0.05
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    results = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    assert history.history["classwise_ece"][0] == pytest.approx(expected, rel=1e-5)
    assert results["classwise_ece"] == pytest.approx(expected, rel=1e-5)


def test_config_round_trip():
    metric = ClasswiseCalibrationError(num_classes=4, num_bins=7, from_logits=True,
                                       name="my_metric", dtype="float64")
    config = metric.get_config()
    assert config["num_classes"] == 4 and config["num_bins"] == 7
    assert config["from_logits"] is True and config["name"] == "my_metric"
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(metric), safe_mode=True)
    assert type(restored) is ClasswiseCalibrationError
    assert restored.get_config() == config
    assert restored.bin_weight.shape == (4, 7) and restored.dtype == "float64"


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: ClasswiseCalibrationError(num_classes=1), r"`num_classes` must be an int >= 2"),
        (lambda: ClasswiseCalibrationError(num_classes="3"), r"`num_classes` must be an int >= 2"),
        (lambda: ClasswiseCalibrationError(3, num_bins=0), r"`num_bins` must be a positive int"),
        (lambda: ClasswiseCalibrationError(3, num_bins=2.5), r"`num_bins` must be a positive int"),
        (lambda: ClasswiseCalibrationError(3, dtype="int32"),
         r"ClasswiseCalibrationError needs dtype float32 or float64, got 'int32'"),
        (lambda: ClasswiseCalibrationError(3, dtype="float16"), r"float32 or float64.*float16"),
        (lambda: ClasswiseCalibrationError(3).update_state([0, 1], np.full((2, 4), 0.25)),
         r"built for num_classes=3, got `y_pred` of shape \(2, 4\)"),
        (lambda: ClasswiseCalibrationError(3).update_state([0], np.ones((1, 3, 3))),
         r"ClasswiseCalibrationError expects `y_pred` of shape \[batch, K\].*\(1, 3, 3\)"),
        (lambda: ClasswiseCalibrationError(3).update_state(np.zeros((2, 2, 1)),
                                                           np.full((2, 3), 1 / 3)),
         r"ClasswiseCalibrationError expects sparse `y_true`.*\(2, 2, 1\)"),
    ],
)
def test_bad_streaming_metric_arguments(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()

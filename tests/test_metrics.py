"""Tests of tfp_bnn.metrics: calibration scores, AUROC and the streaming Keras metrics."""

import math

import keras
import numpy as np
import pytest

from tfp_bnn import metrics
from tfp_bnn.metrics import BrierScore
from tfp_bnn.metrics import ExpectedCalibrationError
from tfp_bnn.metrics import NegativeLogLikelihood

# Five examples, K = 3, num_bins = 4: edges 0, .25, .5, .75, 1 (all exact in binary).
#   probs               label  conf  correct  bin (right-closed)
#   [1.0, 0.0, 0.0]     0      1.0   yes      3  (conf == 1.0 goes to the last bin)
#   [0.2, 0.8, 0.0]     0      0.8   no       3
#   [0.6, 0.2, 0.2]     0      0.6   yes      2
#   [0.3, 0.4, 0.3]     1      0.4   yes      1
#   [0.5, 0.25, 0.25]   2      0.5   no       1  (0.5 is an edge: in (.25, .5])
# Bin 0 = (0, .25] is empty (a confidence is at least 1/K = 1/3).
#   bin 1: n 2, conf (0.4 + 0.5)/2 = 0.45, acc 1/2
#   bin 2: n 1, conf 0.6,                 acc 1
#   bin 3: n 2, conf (1.0 + 0.8)/2 = 0.9, acc 1/2
# ECE = 2/5 |.5 - .45| + 1/5 |1 - .6| + 2/5 |.5 - .9| = .02 + .08 + .16 = 0.26
# accuracy = 3/5
# NLL = (-log 1 - log .2 - log .6 - log .4 - log .25) / 5 = log(5 * 5/3 * 5/2 * 4) / 5
#     = log(250/3) / 5
# Brier = (0 + (.64 + .64) + (.16 + .04 + .04) + (.09 + .36 + .09)
#          + (.25 + .0625 + .5625)) / 5 = (0 + 1.28 + .24 + .54 + .875) / 5 = 0.587
HAND_PROBS = np.array(
    [
        [1.0, 0.0, 0.0],
        [0.2, 0.8, 0.0],
        [0.6, 0.2, 0.2],
        [0.3, 0.4, 0.3],
        [0.5, 0.25, 0.25],
    ]
)
HAND_LABELS = np.array([0, 0, 0, 1, 2])


def test_reliability_curve_on_a_hand_computed_case():
    curve = metrics.reliability_curve(HAND_LABELS, HAND_PROBS, num_bins=4)
    np.testing.assert_array_equal(curve.edges, [0.0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(curve.counts, [0, 2, 1, 2])
    assert curve.counts.dtype == np.int64
    np.testing.assert_allclose(curve.confidence, [np.nan, 0.45, 0.6, 0.9], rtol=1e-12)
    np.testing.assert_allclose(curve.accuracy, [np.nan, 0.5, 1.0, 0.5], rtol=1e-12)


def test_scalar_scores_on_a_hand_computed_case():
    ece = metrics.expected_calibration_error(HAND_LABELS, HAND_PROBS, num_bins=4)
    assert isinstance(ece, float)
    assert ece == pytest.approx(0.26, abs=1e-12)
    assert metrics.accuracy(HAND_LABELS, HAND_PROBS) == pytest.approx(0.6, abs=1e-12)
    nll = metrics.negative_log_likelihood(HAND_LABELS, HAND_PROBS)
    assert nll == pytest.approx(math.log(250 / 3) / 5, rel=1e-12)
    assert metrics.brier_score(HAND_LABELS, HAND_PROBS) == pytest.approx(0.587, abs=1e-12)
    # Labels as [n, 1] and as whole-valued floats give the same numbers.
    assert metrics.expected_calibration_error(
        HAND_LABELS[:, None].astype(np.float32), HAND_PROBS, num_bins=4
    ) == pytest.approx(0.26, abs=1e-12)


def test_one_bin_ece_is_the_gap_between_mean_confidence_and_accuracy():
    # One bin: ECE = |acc - mean conf| = |3/5 - (1 + .8 + .6 + .4 + .5)/5| = |.6 - .66|.
    ece = metrics.expected_calibration_error(HAND_LABELS, HAND_PROBS, num_bins=1)
    assert ece == pytest.approx(0.06, abs=1e-12)


def test_nll_of_a_zero_probability_is_clipped_at_the_float64_normal_minimum():
    nll = metrics.negative_log_likelihood([1, 0], [[1.0, 0.0], [1.0, 0.0]])
    # (-log(tiny) + -log(1)) / 2, tiny = 2.2250738585072014e-308.
    assert nll == pytest.approx(-math.log(np.finfo(np.float64).tiny) / 2, rel=1e-12)
    assert nll == pytest.approx(708.3964185322641 / 2, rel=1e-12)


def test_auroc_on_hand_computed_cases():
    assert metrics.auroc([0.0, 1.0, 2.0], [3.0, 4.0]) == 1.0
    assert metrics.auroc([3.0, 4.0], [0.0, 1.0, 2.0]) == 0.0
    # Pairs (out, in): .2 > .1, .2 = .2, .2 = .2, and .3 beats all three:
    # (1 + .5 + .5 + 3) / 6 = 5/6.
    assert metrics.auroc([0.1, 0.2, 0.2], [0.2, 0.3]) == pytest.approx(5 / 6, abs=1e-15)
    assert metrics.auroc([1.0, 1.0], [1.0, 1.0, 1.0]) == 0.5
    assert metrics.auroc(np.array([1, 2]), np.array([2, 3])) == pytest.approx(7 / 8)


def test_auroc_equals_the_pairwise_count_on_random_data_with_ties():
    rng = np.random.default_rng(3)
    scores_in = rng.integers(0, 12, size=301).astype(np.float64)
    scores_out = rng.integers(3, 15, size=199).astype(np.float64)
    greater = (scores_out[:, None] > scores_in[None, :]).sum()
    ties = (scores_out[:, None] == scores_in[None, :]).sum()
    assert ties > 0
    expected = (greater + 0.5 * ties) / (scores_in.size * scores_out.size)
    assert metrics.auroc(scores_in, scores_out) == pytest.approx(expected, abs=1e-12)


def test_row_sum_tolerance_accepts_float32_softmax_over_many_classes():
    logits = np.random.default_rng(0).normal(scale=5.0, size=(64, 1000)).astype(np.float32)
    probs = keras.ops.convert_to_numpy(keras.ops.softmax(logits))
    labels = np.arange(64) % 1000
    assert np.isfinite(metrics.negative_log_likelihood(labels, probs))


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


def _fixed_classifier(from_logits):
    # Output a fixed function of the input: Dense with constant weights, no training.
    kernel = np.array([[2.0, -1.0, 0.5], [-1.5, 1.0, 2.0]], np.float32)
    dense = keras.layers.Dense(
        3,
        kernel_initializer=keras.initializers.Constant(kernel),
        bias_initializer=keras.initializers.Constant([0.1, 0.0, -0.2]),
        activation=None if from_logits else "softmax",
        trainable=False,
    )
    # A trainable layer the output does not depend on, so `fit` has something to update.
    scale = keras.layers.Dense(2, use_bias=False, kernel_initializer="zeros")
    inputs = keras.Input((2,))
    outputs = dense(keras.layers.Add()([inputs, scale(inputs)]))
    model = keras.Model(inputs, outputs)
    return model, kernel


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("from_logits", [False, True])
def test_metrics_in_compile_fit_and_evaluate(jit_compile, from_logits):
    model, _ = _fixed_classifier(from_logits)
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


GOOD_Y = np.array([0, 1, 2])
GOOD_P = np.array([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
ECE = metrics.expected_calibration_error


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ECE(np.zeros((3, 2), int), GOOD_P), r"shape \[n\] or \[n, 1\].*\(3, 2\)"),
        (lambda: ECE([0, 1.5, 2], GOOD_P), r"integer class ids.*1\.5"),
        (lambda: ECE(np.array(["a", "b", "c"]), GOOD_P), r"integer class ids.*dtype"),
        (lambda: ECE([0, 1, 3], GOOD_P), r"\[0, 3\).*got 3 at index 2"),
        (lambda: ECE([0, -1, 2], GOOD_P), r"\[0, 3\).*got -1"),
        (lambda: ECE([], GOOD_P), r"`labels` is empty"),
        (lambda: ECE([0], np.zeros((0, 3))), r"`probs` is empty.*\(0, 3\)"),
        (lambda: ECE(GOOD_Y, GOOD_P[0]), r"shape \[n, K\].*\(3,\)"),
        (lambda: ECE([0, 0], np.ones((2, 1))), r"K >= 2.*\(2, 1\)"),
        (lambda: ECE(GOOD_Y, GOOD_P * [[1], [np.nan], [1]]), r"finite.*row 1"),
        (lambda: ECE(GOOD_Y, GOOD_P + [[0.6, -0.3, -0.3], [0, 0, 0], [0, 0, 0]]),
         r"\[0, 1\].*1\.1"),
        (lambda: ECE(GOOD_Y, GOOD_P * 0.9), r"sum to 1.*row 0 sums to 0\.9"),
        (lambda: ECE(GOOD_Y, GOOD_P[:2]), r"3 examples but `probs` has 2"),
        (lambda: ECE(GOOD_Y, GOOD_P, num_bins=0), r"num_bins.*0"),
        (lambda: ECE(GOOD_Y, GOOD_P, num_bins=2.5), r"num_bins.*2\.5"),
        (lambda: ECE(GOOD_Y, GOOD_P, num_bins=True), r"num_bins.*True"),
        (lambda: metrics.negative_log_likelihood(GOOD_Y, GOOD_P[:2]), r"3 examples"),
        (lambda: metrics.brier_score(GOOD_Y, GOOD_P * 2), r"\[0, 1\]"),
        (lambda: metrics.accuracy([0, 1, 7], GOOD_P), r"\[0, 3\).*got 7"),
        (lambda: metrics.auroc(np.zeros((2, 2)), [1.0]), r"`scores_in` must be 1-D.*\(2, 2\)"),
        (lambda: metrics.auroc([1.0], [np.nan]), r"`scores_out` must be finite.*nan at index 0"),
        (lambda: metrics.auroc([np.inf], [1.0]), r"`scores_in` must be finite.*inf"),
        (lambda: metrics.auroc([], [1.0]), r"`scores_in` is empty"),
        (lambda: metrics.auroc([1.0], []), r"`scores_out` is empty"),
        (lambda: ExpectedCalibrationError(num_bins=-2), r"num_bins.*-2"),
        (lambda: NegativeLogLikelihood(dtype="float16"), r"float32 or float64.*float16"),
        (lambda: BrierScore().update_state([0], np.ones((1, 2, 2))),
         r"BrierScore expects `y_pred` of shape \[batch, K\].*\(1, 2, 2\)"),
        (lambda: BrierScore().update_state(np.zeros((2, 4)), np.full((2, 3), 1 / 3)),
         r"sparse `y_true`.*\(2, 4\)"),
    ],
)
def test_invalid_inputs_raise_value_errors_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()

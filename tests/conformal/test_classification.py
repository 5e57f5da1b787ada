"""`SplitConformalClassifier` (`tfp_bnn/conformal/classification.py`): LAC, APS and RAPS.

On synthetic multinomial data whose true class probabilities are the model's, LAC and the
randomized APS and RAPS scores are continuous, so over 2,000 calibration sets their
coverage follows the beta-binomial law exactly; deterministic APS covers at least that.
Also: the scores against a per-row loop, set sizes (LAC smallest with true probabilities;
RAPS with a large penalty smaller than APS for an underconfident model), seeding, infinite
quantiles, `ClassificationPrediction` input, config round trips and bad input.
"""

import json
import math

import keras
import numpy as np
import pytest

from tests.conformal import coverage_checks
from tfp_bnn import conformal
from tfp_bnn.conformal import classification
from tfp_bnn.predict import ClassificationPrediction

pytestmark = pytest.mark.jax

N_CAL = coverage_checks.CALIBRATION
ALPHA = coverage_checks.ALPHA
K = 10


def _multinomial(seed, shape, classes=K, spread=2.0):
    """(probs [..., K], labels [...]): softmax of N(0, spread^2) logits, labels drawn from them."""
    rng = np.random.default_rng(seed)
    logits = spread * rng.normal(size=shape + (classes,))
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    cumulative = np.cumsum(probs, axis=-1)
    draws = rng.uniform(size=shape + (1,)) * cumulative[..., -1:]
    labels = np.minimum((draws > cumulative).sum(axis=-1), classes - 1)
    return probs, labels


def _coverage_and_size(classifier, probs, labels):
    """Per-seed (coverage, mean set size) [S], fitting on the first N_CAL rows of each seed."""
    seeds, rows = labels.shape
    coverage, size = np.empty(seeds), np.empty(seeds)
    for seed in range(seeds):
        classifier.fit(labels[seed, :N_CAL], probs[seed, :N_CAL])
        sets = classifier.predict_sets(probs[seed, N_CAL:])
        coverage[seed] = sets[np.arange(rows - N_CAL), labels[seed, N_CAL:]].mean()
        size[seed] = sets.sum(axis=1).mean()
    return coverage, size


@pytest.fixture(scope="module")
def true_probabilities():
    """2,000 seeds of N_CAL calibration and TEST_POINTS test rows, K = 10."""
    return _multinomial(31, (coverage_checks.SEEDS, N_CAL + coverage_checks.TEST_POINTS))


@pytest.mark.parametrize("arguments", [
    {"score": "lac"},
    {"score": "aps"},
    {"score": "raps", "k_reg": 2, "lam": 0.1},
], ids=["lac", "aps", "raps"])
def test_coverage_follows_the_beta_binomial_law(arguments, true_probabilities):
    classifier = conformal.SplitConformalClassifier(alpha=ALPHA, seed=0, **arguments)
    coverage, _ = _coverage_and_size(classifier, *true_probabilities)
    coverage_checks.assert_coverage_law(coverage)


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_deterministic_sets_cover_at_least_one_minus_alpha(score, true_probabilities):
    classifier = conformal.SplitConformalClassifier(alpha=ALPHA, score=score,
                                                    randomized=False)
    coverage, _ = _coverage_and_size(classifier, *true_probabilities)
    mean, variance, _ = coverage_checks.coverage_law()
    # Conservative: at least the exact coverage, up to 4 standard errors of the mean.
    assert coverage.mean() >= mean - 4 * math.sqrt(variance / coverage.size)
    sets = classifier.predict_sets(true_probabilities[0][0])
    assert sets.any(axis=1).all()   # never empty (k_reg = 1 for RAPS)


def _size_differences(probs, labels, first, second):
    """Per-seed mean set size of `second` minus that of `first` (same data, same seeds)."""
    _, size_first = _coverage_and_size(first, probs, labels)
    _, size_second = _coverage_and_size(second, probs, labels)
    return size_second - size_first


def _assert_positive(differences):
    # The mean of S i.i.d. per-seed differences, more than 4 standard errors above 0.
    se = differences.std(ddof=1) / math.sqrt(differences.size)
    assert differences.mean() > 4 * se, (differences.mean(), se)


def test_lac_gives_the_smallest_sets_with_true_probabilities():
    probs, labels = _multinomial(41, (300, N_CAL + 200), spread=3.0)
    lac = conformal.SplitConformalClassifier(alpha=ALPHA, score="lac")
    for other in (conformal.SplitConformalClassifier(alpha=ALPHA, score="aps", seed=1),
                  conformal.SplitConformalClassifier(alpha=ALPHA, score="raps", k_reg=2,
                                                     lam=0.1, seed=1)):
        _assert_positive(_size_differences(probs, labels, lac, other))


def _underconfident(seed, seeds, rows):
    """The label is the model's top class 90% of the time, but the model gives that class
    a probability from 0.3 to 0.95 and spreads the rest almost evenly over the others."""
    rng = np.random.default_rng(seed)
    top_mass = rng.uniform(0.3, 0.95, size=(seeds, rows))
    weights = 1.0 + 0.1 * rng.uniform(-1.0, 1.0, size=(seeds, rows, K - 1))
    tail = (1.0 - top_mass)[..., None] * weights / weights.sum(axis=-1, keepdims=True)
    probs = np.concatenate([top_mass[..., None], tail], axis=-1)
    probs = np.take_along_axis(probs, np.argsort(rng.uniform(size=probs.shape), axis=-1),
                               axis=-1)
    top = probs.argmax(axis=-1)
    other = rng.integers(0, K - 1, size=(seeds, rows))
    other = np.where(other >= top, other + 1, other)
    return probs, np.where(rng.uniform(size=(seeds, rows)) < 0.9, top, other)


def test_raps_with_a_large_penalty_gives_smaller_sets_than_aps():
    probs, labels = _underconfident(51, 300, N_CAL + 200)
    aps = conformal.SplitConformalClassifier(alpha=ALPHA, score="aps", seed=2)
    raps = conformal.SplitConformalClassifier(alpha=ALPHA, score="raps", k_reg=1, lam=1.0,
                                              seed=2)
    _assert_positive(_size_differences(probs, labels, raps, aps))


def _loop_scores(probs, u, lam, k_reg):
    """The (R)APS scores of one row at a time, from the definition."""
    scores = np.empty_like(probs)
    for i, row in enumerate(probs):
        order = sorted(range(len(row)), key=lambda k: (-row[k], k))
        mass = 0.0
        for rank, k in enumerate(order, start=1):
            scores[i, k] = mass + u[i] * row[k] + lam * max(0, rank - k_reg)
            mass += row[k]
    return scores


@pytest.mark.parametrize("lam, k_reg", [(0.0, 0), (0.3, 2), (1.0, 0)])
def test_scores_match_a_per_row_loop(lam, k_reg):
    probs, _ = _multinomial(5, (40,), classes=6)
    probs[0] = [0.25, 0.25, 0.25, 0.25, 0.0, 0.0]   # ties rank by class index
    u = np.random.default_rng(6).uniform(size=40)
    np.testing.assert_allclose(classification.class_scores(probs, u, lam, k_reg),
                               _loop_scores(probs, u, lam, k_reg), rtol=0, atol=1e-12)


@pytest.mark.parametrize("arguments", [
    {"score": "lac"}, {"score": "aps"}, {"score": "aps", "randomized": False},
    {"score": "raps", "k_reg": 0, "lam": 0.5},
], ids=["lac", "aps", "aps-deterministic", "raps"])
def test_quantile_from_a_plain_sort(arguments):
    probs, labels = _multinomial(7, (33,), classes=4)
    classifier = conformal.SplitConformalClassifier(alpha=0.2, seed=3, **arguments)
    classifier.fit(labels, probs)
    picked = probs[np.arange(33), labels]
    if arguments["score"] == "lac":
        scores = 1.0 - picked
    else:
        u = (np.random.default_rng(3).uniform(size=33) if arguments.get("randomized", True)
             else np.ones(33))
        scores = _loop_scores(probs, u, arguments.get("lam", 0.0),
                              arguments.get("k_reg", 0))[np.arange(33), labels]
    k = math.ceil(34 * 0.8)   # 28
    assert classifier.quantile == pytest.approx(np.sort(scores)[k - 1], abs=1e-12)
    assert classifier.num_classes == 4


def test_lac_sets_are_the_classes_above_one_minus_q():
    probs, labels = _multinomial(8, (50,), classes=5)
    lac = conformal.SplitConformalClassifier(alpha=0.2, score="lac").fit(labels, probs)
    test, _ = _multinomial(9, (20,), classes=5)
    np.testing.assert_array_equal(lac.predict_sets(test), test >= 1.0 - lac.quantile)


def test_seeds_repeat_and_differ():
    probs, labels = _multinomial(10, (400,))

    def sets(**arguments):
        classifier = conformal.SplitConformalClassifier(alpha=0.1, **arguments)
        return classifier.fit(labels[:200], probs[:200]).predict_sets(probs[200:])

    np.testing.assert_array_equal(sets(seed=4), sets(seed=4))
    assert not np.array_equal(sets(seed=4), sets(seed=5))
    # Deterministic sets ignore the seed.
    np.testing.assert_array_equal(sets(seed=4, randomized=False),
                                  sets(seed=5, randomized=False))


def test_classification_prediction_input():
    probs, labels = _multinomial(11, (60,), classes=3)
    prediction = ClassificationPrediction.from_samples(probs[None])
    from_prediction = conformal.SplitConformalClassifier(seed=0).fit(labels, prediction)
    from_array = conformal.SplitConformalClassifier(seed=0).fit(labels, probs)
    assert from_prediction.quantile == from_array.quantile
    np.testing.assert_array_equal(from_prediction.predict_sets(prediction),
                                  from_array.predict_sets(probs))


def test_too_few_calibration_rows_give_full_sets():
    probs, labels = _multinomial(12, (8,), classes=3)
    classifier = conformal.SplitConformalClassifier(alpha=0.1, score="lac")
    with pytest.warns(UserWarning, match=r"n = 8 calibration rows.*every set holds every "
                                         r"class.*at least 9 rows"):
        classifier.fit(labels, probs)
    assert classifier.predict_sets(probs).all()
    restored = conformal.SplitConformalClassifier.from_config(
        json.loads(json.dumps(classifier.get_config(), allow_nan=False)))
    assert restored.predict_sets(probs).all()


@pytest.mark.parametrize("arguments", [
    {"score": "lac"}, {"score": "aps", "randomized": False, "seed": 3},
    {"score": "raps", "k_reg": 3, "lam": 0.2, "seed": 9},
], ids=["lac", "aps", "raps"])
def test_config_round_trip(arguments):
    probs, labels = _multinomial(13, (80,), classes=4)
    classifier = conformal.SplitConformalClassifier(alpha=0.2, **arguments).fit(labels, probs)
    config = classifier.get_config()
    expected = {"alpha": 0.2, "calibration_size": 80, "quantile": classifier.quantile,
                "score": arguments["score"], "randomized": arguments.get("randomized", True),
                "k_reg": arguments.get("k_reg"), "lam": arguments.get("lam"),
                "seed": arguments.get("seed"), "num_classes": 4}
    assert config == expected
    restored = conformal.SplitConformalClassifier.from_config(
        json.loads(json.dumps(config, allow_nan=False)))
    assert restored.get_config() == config
    # A restored object draws as a new one with the same seed does.
    fresh = conformal.SplitConformalClassifier.from_config(config)
    np.testing.assert_array_equal(restored.predict_sets(probs), fresh.predict_sets(probs))
    serialized = keras.saving.serialize_keras_object(classifier)
    assert serialized["registered_name"] == "tfp_bnn>SplitConformalClassifier"
    again = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    assert again.get_config() == config


def test_raps_defaults_and_unfitted_config():
    raps = conformal.SplitConformalClassifier(score="raps")
    assert (raps.k_reg, raps.lam) == (classification.DEFAULT_K_REG, classification.DEFAULT_LAM)
    config = conformal.SplitConformalClassifier().get_config()
    assert config["quantile"] is None and config["num_classes"] is None
    assert not conformal.SplitConformalClassifier.from_config(config).fitted


def test_not_fitted():
    classifier = conformal.SplitConformalClassifier()
    with pytest.raises(ValueError, match=r"This SplitConformalClassifier is not fitted: call "
                                         r"fit\(\) before predict_sets"):
        classifier.predict_sets([[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"not fitted: call fit\(\) before num_classes"):
        classifier.num_classes


@pytest.mark.parametrize("arguments, pattern", [
    ({"alpha": 1.0}, r"`alpha` must be a number in \(0, 1\), got 1\.0"),
    ({"score": "thr"}, r"`score` must be one of \['lac', 'aps', 'raps'\], got 'thr'"),
    ({"randomized": 1}, r"`randomized` must be True or False, got 1"),
    ({"score": "aps", "lam": 0.1}, r"`lam` is for score='raps', got lam=0\.1 with "
                                   r"score='aps'"),
    ({"score": "lac", "k_reg": 2}, r"`k_reg` is for score='raps', got k_reg=2 with "
                                   r"score='lac'"),
    ({"score": "raps", "k_reg": -1}, r"`k_reg` must be a non-negative int, got -1"),
    ({"score": "raps", "k_reg": 1.5}, r"`k_reg` must be a non-negative int, got 1\.5"),
    ({"score": "raps", "lam": -0.1}, r"`lam` must be a finite number >= 0, got -0\.1"),
    ({"score": "raps", "lam": np.inf}, r"`lam` must be a finite number >= 0, got inf"),
    ({"seed": -3}, r"`seed` must be a non-negative int, got -3"),
    ({"seed": 1.0}, r"`seed` must be a non-negative int, got 1\.0"),
])
def test_bad_constructor_arguments(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.SplitConformalClassifier(**arguments)


PROBS = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]])


@pytest.mark.parametrize("labels, probs, pattern", [
    ([0, 1, 2], PROBS, r"`labels` has 3 examples but `probs` has 4"),
    ([0, 1, 3, 1], PROBS, r"`labels` must lie in \[0, 3\).*got 3 at index 2"),
    ([0, -1, 2, 1], PROBS, r"`labels` must lie in \[0, 3\).*got -1 at index 1"),
    ([0, 1.5, 2, 1], PROBS, r"`labels` must be integer class ids, got the value 1\.5"),
    ([0, 1, 2, 1], PROBS * 2, r"`probs` must lie in \[0, 1\]"),
    ([0, 1, 2, 1], PROBS * 0.5, r"`probs` rows must sum to 1"),
    ([0, 1, 2, 1], np.where(PROBS == 0.8, np.nan, PROBS), r"`probs` must be finite.*row 1"),
    ([0, 1, 2, 1], PROBS[:, :1], r"`probs` must have shape \[n, K\] with K >= 2"),
])
def test_bad_fit_input(labels, probs, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.SplitConformalClassifier().fit(labels, probs)


def test_bad_predict_input():
    classifier = conformal.SplitConformalClassifier(alpha=0.5).fit([0, 1, 2, 1], PROBS)
    with pytest.raises(ValueError, match=r"`probs` has 2 classes but the classifier was "
                                         r"fitted on 3"):
        classifier.predict_sets([[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"`probs` rows must sum to 1"):
        classifier.predict_sets([[0.5, 0.6, 0.1]])
    with pytest.raises(ValueError, match=r"`probs` must have shape \[n, K\]"):
        classifier.predict_sets([0.2, 0.3, 0.5])


@pytest.mark.parametrize("config, pattern", [
    ({"alpha": 0.5, "calibration_size": 4, "quantile": 0.5, "num_classes": None},
     r"`num_classes` must be an int >= 2, got None"),
    ({"alpha": 0.5, "calibration_size": None, "quantile": None, "num_classes": 3},
     r"`num_classes` \(3\) needs a fit"),
])
def test_bad_configs(config, pattern):
    with pytest.raises(ValueError, match=pattern):
        conformal.SplitConformalClassifier.from_config(config)

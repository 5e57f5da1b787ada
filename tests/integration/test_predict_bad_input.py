"""Bad inputs to tfp_bnn.predict fail before tracing, with a message naming the problem.

One small regression model and one classifier are built per module; every
case checks the exception type and a message that names the argument and
what was wrong. After the bad calls, a good call still works: a rejected
input must not poison the model's cached traced functions.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.predict import ClassificationPrediction
from tfp_bnn.predict import RegressionPrediction

X = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
Y = np.random.default_rng(1).normal(size=5)
LABELS = np.array([0, 1, 2, 1, 0])


@pytest.fixture(scope="module")
def regressor():
    return keras.Sequential([keras.Input((3,)), DenseFlipout(2, kl_weight=0.0, seed=0)])


@pytest.fixture(scope="module")
def classifier():
    return keras.Sequential([keras.Input((3,)), DenseFlipout(3, kl_weight=0.0, seed=1)])


@pytest.fixture(scope="module")
def two_inputs():
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    joined = keras.layers.Concatenate()([a, b])
    return keras.Model({"a": a, "b": b}, DenseFlipout(2, kl_weight=0.0, seed=2)(joined))


def _with_nan(value):
    x = X.copy()
    x[2, 1] = value
    return x


PREDICTORS = {
    "regression": lambda model, x, **kw: tfp_bnn.predict.regression(model, x, **kw),
    "classification": lambda model, x, **kw: tfp_bnn.predict.classification(model, x, **kw),
    "sample": lambda model, x, **kw: tfp_bnn.predict.sample(model, x, **kw),
}


@pytest.mark.parametrize("predictor", sorted(PREDICTORS))
@pytest.mark.parametrize(
    "x, pattern",
    [
        (np.ones(3, "float32"), r"`x` has shape \(3,\) \(rank 1\).*expects.*\(None, 3\)"),
        (np.ones((2, 3, 1), "float32"), r"`x` has shape \(2, 3, 1\) \(rank 3\)"),
        (np.ones((2, 4), "float32"), r"axis 1 has size 4, expected 3"),
        (np.array([["a", "b", "c"]]), r"`x` must hold numbers, got dtype <U1"),
        (np.array([[1.0, None, 2.0]], dtype=object), r"`x` must hold numbers, got dtype object"),
        (_with_nan(np.nan), r"`x` contains NaN or infinite values \(first in example 2\)"),
        (_with_nan(np.inf), r"`x` contains NaN or infinite values \(first in example 2\)"),
        (tf.constant(_with_nan(-np.inf)), r"`x` contains NaN or infinite values"),
        (tf.constant([["a", "b", "c"]]), r"`x` must hold numbers, got a tensor of dtype string"),
        (np.zeros((0, 3), "float32"), r"`x` has no examples"),
        (None, r"`x` is None"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0]], r"`x` is ragged"),
        ([X, X], r"The model takes 1 input array\(s\), got 2"),
        ({"features": X}, r"`x` has keys \['features'\] but the model's inputs are"),
    ],
    ids=["rank1", "rank3", "features", "strings", "objects", "nan", "inf", "tensor_inf",
         "tensor_strings", "empty", "none", "ragged", "two_arrays", "dict_keys"],
)
def test_bad_x(regressor, classifier, predictor, x, pattern):
    model = classifier if predictor == "classification" else regressor
    with pytest.raises(ValueError, match=pattern):
        PREDICTORS[predictor](model, x, num_samples=2)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"num_samples": 0}, r"`num_samples` must be an int in 1..1,000,000, got 0"),
        ({"num_samples": -5}, r"`num_samples` must be an int in 1..1,000,000, got -5"),
        ({"num_samples": 2.0}, r"`num_samples` must be an int in 1..1,000,000, got 2.0"),
        ({"num_samples": True}, r"`num_samples` must be an int in 1..1,000,000, got True"),
        ({"num_samples": "10"}, r"`num_samples` must be an int in 1..1,000,000, got '10'"),
        ({"batch_size": 0}, r"`batch_size` must be a positive int, got 0"),
        ({"batch_size": 1.5}, r"`batch_size` must be a positive int, got 1.5"),
        ({"samples_per_call": -1}, r"`samples_per_call` must be a positive int, got -1"),
        ({"max_rows": 0}, r"`max_rows` must be an int in 1..4,194,304, got 0"),
        ({"output": "quantiles"}, r"`output` must be one of .*got 'quantiles'"),
        ({"noise_variance": 1.0}, r"`noise_variance` is only for output='mean'"),
        ({"output": "mean", "noise_variance": -1.0},
         r"`noise_variance` must be a finite number > 0"),
    ],
)
def test_bad_regression_arguments(regressor, kwargs, pattern):
    kwargs = {"num_samples": 2, **kwargs}
    with pytest.raises(ValueError, match=pattern):
        tfp_bnn.predict.regression(regressor, X, **kwargs)


def test_numpy_integer_num_samples_is_accepted(regressor):
    draws = tfp_bnn.predict.sample(regressor, X, num_samples=np.int64(3))
    assert draws.shape == (3, 5, 2)


def test_nested_list_is_one_input(regressor):
    draws = tfp_bnn.predict.sample(regressor, X.tolist(), num_samples=2)
    assert draws.shape == (2, 5, 2)


@pytest.mark.parametrize(
    "model, pattern",
    [
        ("model.keras", r"`model` must be a Keras model or layer, got str"),
        (None, r"`model` must be a Keras model or layer, got NoneType"),
        (lambda: keras.Sequential([DenseFlipout(2)]), r"The model is not built"),
    ],
    ids=["str", "none", "unbuilt"],
)
def test_bad_model(model, pattern):
    model = model() if callable(model) else model
    with pytest.raises(ValueError, match=pattern):
        tfp_bnn.predict.regression(model, X, num_samples=2)


def test_dict_inputs_are_checked_per_key(two_inputs):
    b = np.ones((5, 2), "float32")
    with pytest.raises(ValueError, match=r"`x\['b'\]` has shape \(5, 3\).*axis 1 has size 3"):
        tfp_bnn.predict.sample(two_inputs, {"a": X, "b": X}, num_samples=2)
    with pytest.raises(ValueError, match=r"`x\['a'\]` contains NaN"):
        tfp_bnn.predict.sample(two_inputs, {"a": _with_nan(np.nan), "b": b}, num_samples=2)
    with pytest.raises(ValueError, match=r"takes a dict of inputs with keys \['a', 'b'\]"):
        tfp_bnn.predict.sample(two_inputs, X, num_samples=2)
    assert tfp_bnn.predict.sample(two_inputs, {"a": X, "b": b}, 2).shape == (2, 5, 2)


def test_rejected_inputs_leave_the_traces_usable(regressor):
    # Wrong ranks used to reach the traced call and relax its input signature
    # to an unknown rank, after which every later call failed.
    for bad in (np.ones(3, "float32"), np.ones((2, 3, 1), "float32")):
        with pytest.raises(ValueError):
            tfp_bnn.predict.sample(regressor, bad, num_samples=2)
    assert tfp_bnn.predict.sample(regressor, X, num_samples=2).shape == (2, 5, 2)


# -- the prediction objects ----------------------------------------------------


@pytest.fixture(scope="module")
def regression(regressor):
    return tfp_bnn.predict.regression(regressor, X, num_samples=4)


@pytest.fixture(scope="module")
def classification(classifier):
    return tfp_bnn.predict.classification(classifier, X, num_samples=4)


@pytest.mark.parametrize("method", ["rmse", "log_likelihood", "coverage"])
@pytest.mark.parametrize(
    "y, pattern",
    [
        (Y[:4], r"`y` has shape \(4,\) but the predictions have shape \(5, 1\)"),
        (np.ones((5, 2)), r"`y` has shape \(5, 2\) but the predictions have shape \(5, 1\)"),
        (np.where(np.arange(5) == 3, np.nan, Y), r"`y` contains NaN or infinite values"),
        (np.array(["a"] * 5), r"`y` must be an array of numbers"),
    ],
    ids=["short", "wide", "nan", "strings"],
)
def test_bad_regression_targets(regression, method, y, pattern):
    with pytest.raises(ValueError, match=pattern):
        getattr(regression, method)(y)


@pytest.mark.parametrize("method", ["interval", "z_interval"])
@pytest.mark.parametrize("level", [0, 1, 1.5, -0.5, float("nan"), True, "0.9"])
def test_bad_levels(regression, method, level):
    with pytest.raises(ValueError, match=r"`level` must be a number in \(0, 1\), got"):
        getattr(regression, method)(level)


def test_bad_coverage_level(regression):
    with pytest.raises(ValueError, match=r"`level` must be a number in \(0, 1\), got 1.5"):
        regression.coverage(Y, 1.5)


@pytest.mark.parametrize(
    "scale, pattern", [(0.0, r"`scale` must be finite and > 0"),
                       (np.nan, r"`scale` must be finite and > 0")])
def test_bad_rescale(regression, scale, pattern):
    with pytest.raises(ValueError, match=pattern):
        regression.rescale(scale=scale)


@pytest.mark.parametrize(
    "means, variances, pattern",
    [
        (np.ones(4), None, r"`sample_means` must have shape \[T, N, \.\.\.\]"),
        (np.zeros((0, 3)), None, r"`sample_means` must have shape .*T >= 1 .*\(0, 3\)"),
        (np.full((2, 3), np.nan), None, r"`sample_means` contains NaN"),
        (np.ones((2, 3)), -np.ones((2, 3)), r"`sample_variances` must be finite and >= 0"),
        (np.ones((2, 3)), np.ones((4, 3)), r"`sample_variances` of shape \(4, 3\) does not "
                                           r"match"),
    ],
)
def test_bad_regression_prediction_arrays(means, variances, pattern):
    with pytest.raises(ValueError, match=pattern):
        RegressionPrediction(means, variances)


@pytest.mark.parametrize("method", ["nll", "accuracy", "brier", "ece"])
@pytest.mark.parametrize(
    "labels, pattern",
    [
        (LABELS[:4], r"`labels` has 4 examples but `probs` has 5"),
        (np.array([0, 1, np.nan, 1, 0]), r"`labels` must be integer class ids, got the value "
                                         r"nan at index 2"),
        (np.array([0, 1, 3, 1, 0]), r"`labels` must lie in \[0, 3\).*got 3 at index 2"),
        (np.array([0, -1, 2, 1, 0]), r"`labels` must lie in \[0, 3\).*got -1 at index 1"),
        (np.array(["a"] * 5), r"`labels` must be integer class ids, got dtype <U1"),
        (np.array([], int), r"`labels` is empty"),
    ],
    ids=["short", "nan", "too_large", "negative", "strings", "empty"],
)
def test_bad_labels(classification, method, labels, pattern):
    with pytest.raises(ValueError, match=pattern):
        getattr(classification, method)(labels)


@pytest.mark.parametrize("num_bins", [0, -2, 2.5])
def test_bad_ece_bins(classification, num_bins):
    with pytest.raises(ValueError, match=r"`num_bins` must be a positive int, got"):
        classification.ece(LABELS, num_bins=num_bins)


def test_bad_scores_and_ood(classification):
    with pytest.raises(ValueError, match=r"`name` must be one of .*got 'variance'"):
        classification.score("variance")
    with pytest.raises(ValueError, match=r"`out_of_distribution` must be a "
                                         r"ClassificationPrediction.*got ndarray"):
        classification.ood_auroc(np.ones(5))


@pytest.mark.parametrize(
    "samples, output, pattern",
    [
        (np.full((2, 5), 0.5), "probabilities", r"shape \[T, N, K\].*got shape \(2, 5\)"),
        (np.full((2, 5, 1), 1.0), "probabilities", r">= 2 classes on the last axis"),
        (np.full((2, 5, 2), 0.5), "softmax", r"`output` must be one of"),
        (np.full((2, 5, 2), 0.9), "probabilities", r"do not sum to 1"),
    ],
)
def test_bad_classification_samples(samples, output, pattern):
    with pytest.raises(ValueError, match=pattern):
        ClassificationPrediction.from_samples(samples, output=output)

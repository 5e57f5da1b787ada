"""Tests of zoo.run.scoring: the one fit -> predict -> score routine."""

import math

import numpy as np
import pytest

import tfp_bnn
import zoo
from tfp_bnn import metrics
from zoo.run import scoring


def test_only_the_moment_trained_transformer_is_scored_in_one_pass():
    moments = zoo.build_model("bayesian_transformer", (4,), num_train=10)
    sampled = zoo.build_model("bayesian_transformer", (4,), num_train=10, path="mc")
    dropout = zoo.build_model("mc_dropout_mlp", (4,), num_train=10)
    assert scoring.sampling_free(moments)
    assert not scoring.sampling_free(sampled) and not scoring.sampling_free(dropout)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 3)).astype("float32")
    y = (x @ np.array([0.5, -1.0, 0.2]) + 0.1 * rng.normal(size=96)).astype("float32")
    model = zoo.build_model("bbb_mlp_heteroscedastic", (3,), num_train=64, seed=0,
                            hidden_units=(8,))
    y_test = y[64:].astype(np.float64)
    scores, prediction = scoring.fit_and_score(model, x[:64], y[:64], x[64:], 10.0 + 3.0 * y_test,
                                               epochs=3, batch_size=16, num_samples=20,
                                               shift=10.0, scale=3.0, seed=0)
    return model, x[64:], y_test, scores, prediction


def test_fit_and_score_reports_every_regression_metric(fitted):
    _, _, _, scores, prediction = fitted
    assert set(scores) == {"rmse", "log_likelihood", "coverage_95", "mean_stddev",
                           "train_seconds", "predict_seconds"}
    assert prediction.num_samples == 20
    assert all(math.isfinite(scores[k]) for k in scores)
    assert 0.0 <= scores["coverage_95"] <= 1.0


def test_scores_are_in_the_data_units(fitted):
    # y = 10 + 3 y_std: the RMSE and the predictive sd scale by 3, the log
    # density per point drops by log 3, the coverage stays.
    _, _, y, scores, prediction = fitted
    standard = scoring.regression_scores(prediction, y)
    assert scores["rmse"] == pytest.approx(3.0 * standard["rmse"], rel=1e-9)
    assert scores["mean_stddev"] == pytest.approx(3.0 * standard["mean_stddev"], rel=1e-9)
    assert scores["log_likelihood"] == pytest.approx(standard["log_likelihood"] - math.log(3.0),
                                                     rel=1e-9)
    assert scores["coverage_95"] == standard["coverage_95"]


def test_row_log_likelihoods_average_to_the_scored_log_likelihood(fitted):
    # Each row's log density in data units is its standardised one minus log 3.
    _, _, y, scores, prediction = fitted
    rows, rmse = scoring.row_log_likelihoods(prediction, 10.0 + 3.0 * y, shift=10.0, scale=3.0)
    standard_rows, _ = scoring.row_log_likelihoods(prediction, y)
    assert rows.shape == (len(y),) and rows.dtype == np.float64
    assert np.mean(rows) == scores["log_likelihood"] and rmse == scores["rmse"]
    np.testing.assert_allclose(rows, standard_rows - math.log(3.0), rtol=1e-9)


def test_predict_in_data_units_standardises_the_inputs_and_rescales_the_targets(fitted):
    # Inputs x = 2 + 5 x_std, targets y = 10 + 3 y_std: the prediction at raw inputs is
    # the standardised one moved to the data's units.
    model, x_std, _, _, _ = fitted

    class Scaler:
        def __init__(self, mean, std):
            self.mean, self.std = mean, std

        def transform(self, values):
            return (values - self.mean) / self.std
    with tfp_bnn.mean_mode(model):  # every sample the posterior mean: comparable calls
        expected, _ = scoring.predict(model, x_std, num_samples=2)
        actual = scoring.predict_in_data_units(model, 2.0 + 5.0 * x_std.astype(np.float64),
                                               Scaler(2.0, 5.0), Scaler(10.0, 3.0),
                                               num_samples=2)
    np.testing.assert_allclose(actual.mean, 10.0 + 3.0 * expected.mean, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(actual.total_variance, 9.0 * expected.total_variance, rtol=1e-5)


def test_classification_scores_are_the_library_metrics():
    model = zoo.build_model("flipout_mlp", (4,), task="classification", num_classes=3,
                            num_train=20, seed=0)
    x = np.random.default_rng(1).normal(size=(20, 4)).astype("float32")
    labels = np.arange(20) % 3
    scores, prediction = scoring.score(model, x, labels, "classification", num_samples=4)
    assert scores["accuracy"] == metrics.accuracy(labels, prediction.probs)
    assert scores["nll"] == metrics.negative_log_likelihood(labels, prediction.probs)
    assert scores["ece"] == metrics.expected_calibration_error(labels, prediction.probs, 15)
    assert scores["brier"] == metrics.brier_score(labels, prediction.probs)


@pytest.mark.parametrize("kwargs, message", [
    ({"task": "ranking"}, "`task` must be one of"),
    ({"num_samples": 0}, "`num_samples` must be a positive int"),
])
def test_bad_arguments_name_themselves(fitted, kwargs, message):
    model, x, y, _, _ = fitted
    with pytest.raises(ValueError, match=message):
        scoring.score(model, x, y, **kwargs)


def test_a_deep_ensemble_is_predicted_in_whole_rounds_of_its_members():
    x = np.random.default_rng(1).normal(size=(7, 3)).astype("float32")
    plain = zoo.build_model("deep_ensemble", (3,), num_train=10, num_members=2,
                            hidden_units=(4,))
    prediction, _ = scoring.predict(plain, x, num_samples=100)
    assert prediction.num_samples == 2  # deterministic members: T = M is the exact mixture
    bayesian = zoo.build_model("deep_ensemble", (3,), num_train=10, num_members=2,
                               member="flipout_mlp", hidden_units=(4,))
    prediction, _ = scoring.predict(bayesian, x, num_samples=5)
    assert prediction.num_samples == 6  # rounded up to whole rounds of the 2 members


def test_seeded_batches_train_the_same_weights_twice_and_need_a_seed():
    x = np.random.default_rng(2).normal(size=(40, 3)).astype("float32")
    y = x[:, 0].copy()

    def trained():
        model = zoo.build_model("mc_dropout_mlp", (3,), num_train=40, seed=0,
                                hidden_units=(4,))
        history, _ = scoring.fit(model, x, y, epochs=2, batch_size=16, seed=5,
                                 seeded_batches=True)
        assert len(history.history["loss"]) == 2
        assert int(model.optimizer.iterations) == 2 * 3  # ceil(40 / 16) batches an epoch
        return model.get_weights()
    for first, second in zip(trained(), trained()):
        np.testing.assert_array_equal(first, second)
    with pytest.raises(ValueError, match="`seeded_batches` needs a `seed`"):
        scoring.fit(zoo.build_model("mc_dropout_mlp", (3,), num_train=40), x, y, epochs=1,
                    seeded_batches=True)

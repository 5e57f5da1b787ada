"""Tests of zoo.run.auto: model selection on the training rows only, then refit and score.

Two tiny candidates stand in for `CANDIDATES`: a homoscedastic MC dropout MLP whose
learning rate (1e-6) leaves it untrained, listed first, and a heteroscedastic one trained
at 1e-2 on data whose noise grows with |x1|. One module-scoped `auto` run and one `select`
run on the same training rows are shared by the selection tests.
"""

import dataclasses
import json
import math

import numpy as np
import pytest

import zoo
from zoo.run import auto
from zoo.run import scoring
from zoo.run.auto import Candidate

UNTRAINED = Candidate("untrained", "mc_dropout_mlp",
                      {"hidden_units": (4,), "learning_rate": 1e-6}, batch_size=32, steps=40)
HETEROSCEDASTIC = Candidate("heteroscedastic", "mc_dropout_mlp_heteroscedastic",
                            {"hidden_units": (16,), "rate": 0.01, "learning_rate": 1e-2},
                            batch_size=32, steps=60)
TINY = (UNTRAINED, HETEROSCEDASTIC)


def _data(rows, seed):
    # y = 50 + 10 (2 x0 + (0.1 + |x1|) e): data units far from standardised ones.
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    return x, 50.0 + 10.0 * (2.0 * x[:, 0] + (0.1 + np.abs(x[:, 1])) * rng.normal(size=rows))


X, Y = _data(120, 0)
X_TEST, Y_TEST = _data(40, 1)


def _without_seconds(selection):
    # Wall times differ between runs; everything else must not.
    return dataclasses.replace(selection, seconds=0.0, trials=tuple(
        dataclasses.replace(t, seconds=0.0) for t in selection.trials))


@pytest.fixture(scope="module")
def searched():
    result = auto.auto(X, Y, X_TEST, Y_TEST, seed=3, candidates=TINY)
    alone = auto.select(X, Y, seed=3, candidates=TINY)
    return result, alone


def test_same_seed_same_choice_and_scores_and_test_rows_never_read(searched):
    # `select` alone never had the test rows; `auto` had them. Equal floats everywhere
    # (validation LLs of every check) mean the test rows moved no statistic, weight or
    # choice, and that the search is reproducible given the seed.
    result, alone = searched
    assert _without_seconds(result.selection) == _without_seconds(alone)
    assert not alone.budget_hit and alone.skipped == ()
    assert (alone.num_fit, alone.num_validation) == (96, 24)


def test_the_candidate_better_on_validation_is_chosen(searched):
    _, selection = searched
    untrained, heteroscedastic = selection.trials
    assert selection.candidate == HETEROSCEDASTIC
    # The untrained MLP predicts ~N(50, 1) in standardised units: its LL is about that of
    # the marginal, the trained one's far above (data with noise sd ~ 10 (0.1 + |x1|)).
    assert heteroscedastic.log_likelihood > untrained.log_likelihood + 0.5
    assert heteroscedastic.rmse < untrained.rmse


def test_the_best_epochs_are_the_best_check_of_the_recorded_curve(searched):
    _, selection = searched
    for trial in selection.trials:
        epochs, lls, _ = zip(*trial.curve)
        best = int(np.argmax(lls))  # the first of equal maxima, as the search keeps it
        assert trial.best_epochs == epochs[best] and trial.log_likelihood == lls[best]
        every = max(1, trial.max_epochs // auto.NUM_CHECKS)
        assert all(e % every == 0 or e == trial.max_epochs for e in epochs)
    assert selection.epochs == selection.trials[1].best_epochs


def test_early_stopping_stops_patience_checks_after_the_best(monkeypatch):
    # A scripted validation LL: best at the 3rd check, worse ever after.
    script = iter([-3.0, -2.0, -1.0] + [-1.5 - 0.1 * k for k in range(30)])
    real = scoring.regression_scores

    def scripted(prediction, y, shift, scale):
        scores = real(prediction, y, shift, scale)
        scores["log_likelihood"] = next(script)
        return scores
    monkeypatch.setattr(scoring, "regression_scores", scripted)
    selection = auto.select(X, Y, seed=0, candidates=(HETEROSCEDASTIC,))
    (trial,) = selection.trials
    every = max(1, trial.max_epochs // auto.NUM_CHECKS)
    assert [e for e, _, _ in trial.curve] == [every * k for k in range(1, 4 + auto.PATIENCE)]
    assert selection.epochs == trial.best_epochs == 3 * every
    assert trial.log_likelihood == -1.0 and not trial.cut_by_budget


def test_the_refit_trains_the_chosen_epochs_on_all_training_rows(searched):
    result, _ = searched
    batches = math.ceil(len(X) / HETEROSCEDASTIC.batch_size)
    assert int(result.model.optimizer.iterations) == result.selection.epochs * batches
    assert result.x_scaler.mean == pytest.approx(X.mean(axis=0), rel=1e-12)
    # Scores in the data's units: an RMSE near the noise (~9), far from std(y) (~22) or
    # the offset 50 a standardised-unit mix-up would leave.
    assert result.scores["rmse"] < 0.6 * np.std(Y_TEST)
    assert math.isfinite(result.scores["log_likelihood"])
    assert result.predict(X_TEST, num_samples=20).rmse(Y_TEST) < 0.6 * np.std(Y_TEST)


def test_a_hit_budget_cuts_the_running_candidate_and_skips_the_rest():
    selection = auto.select(X, Y, seed=0, budget_minutes=1e-6,
                            candidates=(HETEROSCEDASTIC, UNTRAINED))
    (trial,) = selection.trials
    assert selection.budget_hit and selection.skipped == ("untrained",)
    assert trial.cut_by_budget and len(trial.curve) == 1
    assert selection.candidate == HETEROSCEDASTIC and selection.epochs == trial.curve[0][0]


def test_the_selection_is_plain_json(searched):
    _, selection = searched
    record = json.loads(json.dumps(selection.to_json(), allow_nan=False))
    assert record["candidate"]["name"] == "heteroscedastic"
    assert [t["name"] for t in record["trials"]] == ["untrained", "heteroscedastic"]
    assert record["trials"][1]["curve"][0][0] == selection.trials[1].curve[0][0]
    assert record["budget_hit"] is False and record["skipped"] == []


def test_zoo_exports_auto():
    assert zoo.auto is auto.auto and "auto" in dir(zoo)


@pytest.mark.parametrize("arguments, message", [
    ({"budget_minutes": 0}, "`budget_minutes` must be a finite number > 0"),
    ({"budget_minutes": math.inf}, "`budget_minutes` must be a finite number > 0"),
    ({"budget_minutes": math.nan}, "`budget_minutes` must be a finite number > 0"),
    ({"validation_fraction": 0.0}, "`validation_fraction` must be a number in"),
    ({"validation_fraction": 1.0}, "`validation_fraction` must be a number in"),
    ({"x": X[:6], "y": Y[:6]}, "`x` has 6 rows: too few to hold out 20%"),
    ({"x": np.where(X == X[5, 1], np.nan, X)}, r"`x` has a NaN or infinite value \(first in "
                                               r"row 5\)"),
    ({"y": Y[:-1]}, "`y` has 119 rows, the inputs 120"),
    ({"y": np.stack([Y, Y], axis=1)}, "`y` must hold one target per row"),
    ({"x": X[:, 0]}, "`x` must be a non-empty 2-D table"),
    ({"x": X.astype(str)}, "`x` must be numeric"),
    ({"seed": -1}, "`seed` must be a non-negative int"),
    ({"candidates": []}, "`candidates` must be a non-empty list"),
])
def test_bad_search_arguments_are_refused_in_one_line_before_any_training(arguments,
                                                                           message):
    call = {"x": X, "y": Y, "candidates": TINY, **arguments}
    with pytest.raises(ValueError, match=message) as error:
        auto.select(**call)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arguments, message", [
    ({"x_test": X_TEST}, "`x_test` and `y_test` go together"),
    ({"x_test": X_TEST[:, :2], "y_test": Y_TEST}, "`x_test` has 2 columns, `x_train` 3"),
    ({"x_test": X_TEST, "y_test": Y_TEST[:3]}, "`y_test` has 3 rows"),
    ({"num_samples": 0}, "`num_samples` must be an int in 1..1,000,000, got 0"),
    ({"budget_minutes": -1.0}, "`budget_minutes`"),
])
def test_bad_auto_arguments_are_refused_in_one_line(arguments, message):
    with pytest.raises(ValueError, match=message) as error:
        auto.auto(X, Y, candidates=TINY, **arguments)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arguments, message", [
    ({"num_samples": 10**7}, r"`num_samples` must be an int in 1\.\.1,000,000, got 10000000"),
    # 2 * 10**6 * 10**5 float64 sampled means and variances: 1.6 TB.
    ({"num_samples": 10**6, "x_test": np.zeros((10**5, 3)), "y_test": np.zeros(10**5)},
     r"The test predictive's sampled means and variances of shape \(2, 1000000, 100000\) "
     r"would need .* GiB, over half of this machine's memory"),
])
def test_sizes_are_refused_before_the_search(monkeypatch, arguments, message):
    # They were refused only when the refitted model predicted, after the whole search.
    def no_search(*args, **kwargs):
        raise AssertionError("the search started")

    monkeypatch.setattr(auto, "select", no_search)
    with pytest.raises(ValueError, match=message) as error:
        auto.auto(X, Y, candidates=TINY, **arguments)
    assert "\n" not in str(error.value)

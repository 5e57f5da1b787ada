"""Tests of zoo.run.auto: model selection on the training rows only, then refit and score.

Two tiny candidates stand in for `CANDIDATES` (tests/zoo/run/auto_cases.py). One
module-scoped `auto` run and one `select` run on the same training rows are shared by the
selection tests.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.zoo.run.auto_cases import HETEROSCEDASTIC
from tests.zoo.run.auto_cases import TINY
from tests.zoo.run.auto_cases import UNTRAINED
from tests.zoo.run.auto_cases import X
from tests.zoo.run.auto_cases import X_TEST
from tests.zoo.run.auto_cases import Y
from tests.zoo.run.auto_cases import Y_TEST
from tests.zoo.run.auto_cases import without_seconds
import zoo
from zoo.run import auto
from zoo.run import auto_refit
from zoo.run import scoring


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
    assert without_seconds(result.selection) == without_seconds(alone)
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
    real = scoring.row_log_likelihoods

    def scripted(prediction, y, shift, scale):
        rows, rmse = real(prediction, y, shift, scale)
        return np.full_like(rows, next(script)), rmse
    monkeypatch.setattr(scoring, "row_log_likelihoods", scripted)
    selection = auto.select(X, Y, seed=0, candidates=(HETEROSCEDASTIC,))
    (trial,) = selection.trials
    every = max(1, trial.max_epochs // auto.NUM_CHECKS)
    assert [e for e, _, _ in trial.curve] == [every * k for k in range(1, 4 + auto.PATIENCE)]
    assert selection.epochs == trial.best_epochs == 3 * every
    assert trial.log_likelihood == -1.0 and not trial.cut_by_budget


def test_the_refit_trains_the_chosen_epochs_on_all_rows_but_the_guard_slice(searched):
    result, selection = searched
    _, validation_rows = auto.cut(len(X), 3, selection.num_validation)
    guard = validation_rows[:12]  # GUARD_SHARE = 0.5 of the 24 validation rows
    rows = np.setdiff1d(np.arange(len(X)), guard)
    assert result.refit["kept"] == "refit"
    assert (result.refit["refit_rows"], result.refit["guard_rows"]) == (108, 12)
    batches = math.ceil(len(rows) / HETEROSCEDASTIC.batch_size)
    assert int(result.model.optimizer.iterations) == result.selection.epochs * batches
    assert result.x_scaler.mean == pytest.approx(X[rows].mean(axis=0), rel=1e-12)
    # The guard's record: both models' mean log-likelihoods on the guard rows, and the
    # refit kept because it is not clearly worse.
    assert result.refit["difference"] == pytest.approx(
        result.refit["refit_ll"] - result.refit["search_ll"], abs=1e-9)
    assert result.refit["difference"] >= -auto_refit.GUARD_SES * result.refit["difference_se"]
    # Scores in the data's units: an RMSE near the noise (~9), far from std(y) (~22) or
    # the offset 50 a standardised-unit mix-up would leave.
    assert result.scores["rmse"] < 0.6 * np.std(Y_TEST)
    assert math.isfinite(result.scores["log_likelihood"])
    assert result.predict(X_TEST, num_samples=20).rmse(Y_TEST) < 0.6 * np.std(Y_TEST)


def test_the_step_budget_cuts_the_running_candidate_and_skips_the_rest():
    # HETEROSCEDASTIC trains 96 fit rows in 3 batches an epoch, 20 epochs by its 60
    # steps: 30 steps leave it 10 epochs and nothing for the next candidate.
    selection = auto.select(X, Y, seed=0, budget_steps=30,
                            candidates=(HETEROSCEDASTIC, UNTRAINED))
    (trial,) = selection.trials
    assert selection.budget_hit and selection.skipped == ("untrained",)
    assert not selection.minutes_cut and selection.steps == trial.steps == 30
    assert trial.cut_by_budget and trial.curve[-1][0] == 10 and trial.max_epochs == 20
    assert selection.candidate == HETEROSCEDASTIC and selection.epochs == trial.best_epochs
    again = auto.select(X, Y, seed=0, budget_steps=30, candidates=(HETEROSCEDASTIC, UNTRAINED))
    assert without_seconds(again) == without_seconds(selection)


def test_a_busy_machine_chooses_the_same_with_the_same_scores_to_the_bit():
    # Two CPU hogs per core of this machine compete with the second search; its budget
    # counts steps, so every check's validation scores and the choice are the same floats.
    quiet = auto.select(X, Y, seed=5, budget_steps=75, candidates=TINY)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 1))]
    try:
        busy = auto.select(X, Y, seed=5, budget_steps=75, candidates=TINY)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert without_seconds(busy) == without_seconds(quiet)
    assert [t.curve for t in busy.trials] == [t.curve for t in quiet.trials]
    assert busy.skipped == () and busy.trials[1].cut_by_budget  # 75 steps: 39 + 36


def test_the_minutes_cap_cuts_the_running_candidate_and_says_so():
    selection = auto.select(X, Y, seed=0, budget_minutes=1e-6,
                            candidates=(HETEROSCEDASTIC, UNTRAINED))
    (trial,) = selection.trials
    assert selection.budget_hit and selection.minutes_cut
    assert selection.skipped == ("untrained",)
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
    ({"budget_steps": 0}, "`budget_steps` must be a positive int, got 0"),
    ({"budget_steps": 2}, r"`budget_steps` is 2: below one epoch of the first candidate on 96 "
                          r"rows \(3 steps\)"),
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


def test_a_search_records_each_trials_rows_and_gap(searched):
    _, selection = searched
    untrained, heteroscedastic = selection.trials
    for trial in selection.trials:
        assert trial.row_log_likelihoods.shape == (selection.num_validation,)
        assert np.mean(trial.row_log_likelihoods) == trial.log_likelihood
    assert selection.selection_se == auto.SELECTION_SE
    assert [g["name"] for g in selection.gaps] == ["untrained", "heteroscedastic"]
    assert selection.gaps[1]["gap"] == 0.0
    assert selection.gaps[0]["gap"] == pytest.approx(
        heteroscedastic.log_likelihood - untrained.log_likelihood, rel=1e-9)
    assert selection.gaps[0]["gap"] > selection.gaps[0]["se"]  # clearly better: chosen
    record = selection.to_json()
    assert "row_log_likelihoods" not in record["trials"][0]
    assert record["gaps"] == [dict(g) for g in selection.gaps]


def test_a_bad_selection_tolerance_is_refused_before_any_training():
    with pytest.raises(ValueError, match="selection_se"):
        auto.select(X, Y, seed=0, candidates=TINY, selection_se=-1.0)
    with pytest.raises(ValueError, match="selection_se"):
        auto.auto(X, Y, seed=0, candidates=TINY, selection_se=float("nan"))


def test_conformal_intervals_calibrated_on_the_guard_rows_are_scored_on_the_test_rows(searched):
    result, _ = searched
    record = result.conformal
    # 24 validation rows, half of them the guard: 12 calibration rows, enough for 90%.
    assert record["calibration_rows"] == result.refit["guard_rows"] == 12
    assert record["level"] == pytest.approx(0.9)
    for key in ("conformal_coverage", "model_coverage"):
        # Coverage is a fraction of the 40 test rows.
        covered = record[key] * len(Y_TEST)
        assert 0.0 <= record[key] <= 1.0 and abs(covered - round(covered)) < 1e-9
    assert record["conformal_width"] > 0 and record["model_width"] > 0
    assert auto.auto(X, Y, seed=3, candidates=(HETEROSCEDASTIC,)).conformal is None

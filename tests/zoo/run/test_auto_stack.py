"""Tests of zoo.run.auto_stack: the stacking weights against a general-purpose optimiser, the
mixture a `Stack` predicts against its closed form, and a stacked `auto` run end to end."""

import math

import keras
import numpy as np
import pytest
from scipy import optimize
from scipy import special
from scipy import stats

from tests.zoo.run.auto_cases import HETEROSCEDASTIC
from tests.zoo.run.auto_cases import X
from tests.zoo.run.auto_cases import X_TEST
from tests.zoo.run.auto_cases import Y
from tests.zoo.run.auto_cases import Y_TEST
from tfp_bnn.data import Standardizer
from zoo.run import auto
from zoo.run import auto_stack
from zoo.run.candidates import Candidate


def _objective(weights, logs):
    return np.mean(special.logsumexp(np.log(np.maximum(weights, 1e-300)) + logs, axis=1))


def _rows(rng, n=400):
    # Three Gaussian predictives of y ~ N(0, 1): each off in its own way, so the mixture
    # of all three beats every one of them.
    y = rng.normal(size=n)
    return np.stack([stats.norm.logpdf(y, 0.3, 0.8), stats.norm.logpdf(y, -0.4, 1.0),
                     stats.norm.logpdf(y, 0.0, 1.6)], axis=1)


def test_the_weights_maximise_the_mixture_log_score_as_a_general_optimiser_finds():
    logs = _rows(np.random.default_rng(0))
    weights = auto_stack.stacking_weights(logs, min_weight=0.0)
    # SciPy's SLSQP on the simplex, from the uniform start: the same maximum.
    found = optimize.minimize(lambda w: -_objective(w, logs), np.full(3, 1 / 3),
                              method="SLSQP", bounds=[(0, 1)] * 3,
                              constraints={"type": "eq", "fun": lambda w: w.sum() - 1},
                              options={"ftol": 1e-14, "maxiter": 500})
    assert found.success
    assert _objective(weights, logs) >= -found.fun - 1e-9
    np.testing.assert_allclose(weights, found.x, atol=2e-3)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    # The mixture scores above its best member.
    assert _objective(weights, logs) > logs.mean(axis=0).max() + 1e-3


def test_a_dominated_candidate_gets_no_weight_and_small_weights_are_dropped():
    rng = np.random.default_rng(1)
    logs = _rows(rng)
    worse = logs[:, :1] - 1.0  # candidate 0, e^-1 times as likely on every row
    full = auto_stack.stacking_weights(np.concatenate([logs, worse], axis=1), min_weight=0.0)
    assert full[3] < 1e-6
    kept = auto_stack.stacking_weights(np.concatenate([logs, worse], axis=1))
    assert kept[3] == 0.0 and kept.sum() == pytest.approx(1.0, abs=1e-12)
    small = full[:3] >= auto_stack.MIN_WEIGHT
    np.testing.assert_allclose(kept[:3][small], full[:3][small] / full[:3][small].sum(),
                               rtol=1e-12)
    # One candidate: all the weight.
    assert auto_stack.stacking_weights(logs[:, :1]).tolist() == [1.0]


@pytest.mark.parametrize("logs, message", [
    (np.zeros((4,)), r"\[rows, candidates\]"),
    (np.zeros((0, 2)), r"\[rows, candidates\]"),
    (np.array([[0.0, np.nan]]), "NaN or infinite"),
    (np.array([[0.0, -np.inf]]), "NaN or infinite"),
])
def test_bad_log_densities_are_refused_in_one_line(logs, message):
    with pytest.raises(ValueError, match=message):
        auto_stack.stacking_weights(logs)


def test_the_sample_counts_follow_the_weights_in_each_members_granularity():
    assert auto_stack.sample_counts([0.5, 0.3, 0.2], [1, 1, 1], 100) == [50, 30, 20]
    # A deep ensemble of 5 members contributes a multiple of 5; a tiny weight one unit.
    assert auto_stack.sample_counts([0.62, 0.37, 0.01], [5, 1, 1], 100) == [60, 37, 1]


class Gaussian(keras.Model):
    """A deterministic heteroscedastic 'network': mean `shift`, variance `variance`."""

    def __init__(self, shift, variance, **kwargs):
        super().__init__(**kwargs)
        self.shift, self.log_variance = shift, math.log(variance)

    def call(self, inputs):
        zeros = keras.ops.zeros_like(inputs[:, 0])
        return keras.ops.stack([zeros + self.shift, zeros + self.log_variance], axis=-1)


def _identity(columns):
    scaler = Standardizer()
    scaler.mean, scaler.std = np.zeros(columns), np.ones(columns)
    return scaler


def test_a_stack_predicts_the_weighted_mixture_of_its_members():
    members = [Gaussian(-1.0, 0.25), Gaussian(2.0, 1.0)]
    for member in members:
        member(np.zeros((1, 2), "float32"))
    y_scaler = Standardizer()
    y_scaler.mean, y_scaler.std = np.float64(10.0), np.float64(2.0)
    stack = auto_stack.Stack(members, [0.3, 0.7], _identity(2), y_scaler, names=("a", "b"))
    y = np.array([7.0, 9.0, 12.0, 14.5])
    prediction = stack.predict(np.zeros((4, 2)), num_samples=100)
    # In the data's units: members N(8, 1) and N(14, 4), weights 0.3 and 0.7.
    expected = np.log(0.3 * stats.norm.pdf(y, 8.0, 1.0) + 0.7 * stats.norm.pdf(y, 14.0, 2.0))
    np.testing.assert_allclose(prediction.log_likelihood(y).reshape(-1), expected, rtol=1e-6)
    np.testing.assert_allclose(prediction.mean.reshape(-1), 0.3 * 8 + 0.7 * 14, rtol=1e-6)
    assert stack.record() == {"a": 0.3, "b": 0.7}


@pytest.mark.parametrize("weights, message", [
    ([0.5], "one weight per member"),
    ([0.0, 1.0], "> 0 and sum to 1"),
    ([0.5, 0.6], "> 0 and sum to 1"),
])
def test_bad_stacks_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        auto_stack.Stack([Gaussian(0.0, 1.0), Gaussian(0.0, 1.0)], weights, _identity(2),
                         _identity(1))


WIDER = Candidate("wider", "mc_dropout_mlp_heteroscedastic",
                  {"hidden_units": (32,), "rate": 0.01, "learning_rate": 1e-2},
                  batch_size=32, steps=60)


def test_auto_refits_every_member_of_a_stack_and_predicts_their_mixture(monkeypatch):
    # The table is too small for the stacking weights to split (24 validation rows: one
    # candidate takes all); fixed weights stand in for them to test the refit and the
    # prediction of a two-member stack.
    def fixed(trials, candidates, min_weight=auto_stack.MIN_WEIGHT):
        by_name = {c.name: c for c in candidates}
        return tuple((by_name[t.name], t, w) for t, w in zip(trials, (0.4, 0.6)))
    monkeypatch.setattr(auto_stack, "members", fixed)
    result = auto.auto(X, Y, X_TEST, Y_TEST, seed=3, candidates=(HETEROSCEDASTIC, WIDER))
    assert result.refit["members"] == {"heteroscedastic": 0.4, "wider": 0.6}
    assert result.stack.names == ("heteroscedastic", "wider")
    assert result.refit["kept"] == "refit" and result.refit["refit_rows"] == 108
    for member, trial in zip(result.stack.members, result.selection.trials):
        batches = math.ceil(108 / 32)  # each member its own best epochs on the refit rows
        assert int(member.optimizer.iterations) == trial.best_epochs * batches
    with pytest.raises(ValueError, match="a stack of 2 models"):
        _ = result.model
    prediction = result.predict(X_TEST, num_samples=100)
    assert prediction.num_samples == 100  # 40 + 60 samples
    assert result.scores["rmse"] < 0.6 * np.std(Y_TEST)
    assert math.isfinite(result.scores["log_likelihood"])


def test_without_stacking_auto_keeps_the_one_chosen_candidate():
    result = auto.auto(X, Y, seed=3, candidates=(HETEROSCEDASTIC, WIDER), stack=False)
    assert result.refit["members"] == {result.selection.candidate.name: 1.0}
    assert result.model is result.stack.members[0]


def test_the_members_of_a_search_are_its_scored_trials_with_weight():
    rng = np.random.default_rng(2)
    logs = _rows(rng)

    def trial(name, rows):
        return auto.Trial(name, None if rows is None else float(np.mean(rows)), 1.0, 1, 1,
                          0.0, (), row_log_likelihoods=rows)
    trials = (trial("a", logs[:, 0]), trial("diverged", None), trial("b", logs[:, 1]),
              trial("c", logs[:, 2]))
    candidates = [Candidate(name, "mc_dropout_mlp") for name in ("a", "diverged", "b", "c")]
    members = auto_stack.members(trials, candidates)
    expected = auto_stack.stacking_weights(logs)
    assert [(c.name, t.name) for c, t, _ in members] == [
        (name, name) for name, w in zip("abc", expected) if w > 0]
    assert [w for _, _, w in members] == [w for w in expected if w > 0]
    with pytest.raises(ValueError, match="at least one trial with a finite"):
        auto_stack.members((trial("diverged", None),), candidates)

"""Tests of zoo.run.auto_refit: the guarded refit of `auto`'s choice.

The refit kept in the ordinary case is checked by tests/zoo/run/test_auto.py (its shared
`auto` run); here a refit that collapses, and the decision rule on its own.
"""

import numpy as np
import pytest

from tests.zoo.run.auto_cases import HETEROSCEDASTIC
from tests.zoo.run.auto_cases import X
from tests.zoo.run.auto_cases import X_TEST
from tests.zoo.run.auto_cases import Y
from tests.zoo.run.auto_cases import Y_TEST
from zoo.run import auto
from zoo.run import auto_refit
from zoo.run import scoring


def test_a_collapsed_refit_is_replaced_by_the_search_model(monkeypatch):
    # The refit's training (the one fit without validation checks) is cut to one step on
    # one row: a network that predicts ~N(0, 1) in standardised units, whose guard
    # log-likelihood falls far below the search model's.
    real_fit = scoring.fit

    def no_refit(model, x, y, epochs, batch_size, callbacks=(), **kwargs):
        if callbacks:  # the search's runs
            return real_fit(model, x, y, epochs, batch_size, callbacks=callbacks, **kwargs)
        return real_fit(model, x[:1], y[:1], 1, 1, seed=0)
    monkeypatch.setattr(scoring, "fit", no_refit)
    result = auto.auto(X, Y, X_TEST, Y_TEST, seed=3, candidates=(HETEROSCEDASTIC,))
    record = result.refit
    assert record["kept"] == "search_model"
    assert record["difference"] < -auto_refit.GUARD_SES * record["difference_se"]
    assert record["refit_ll"] < record["search_ll"] - 0.5
    # The kept model is the search's: its standardisers are the fit part's, and its test
    # scores those of a trained network.
    fit_rows, _ = auto.cut(len(X), 3, result.selection.num_validation)
    assert result.x_scaler.mean == pytest.approx(X[fit_rows].mean(axis=0), rel=1e-12)
    assert result.scores["rmse"] < 0.6 * np.std(Y_TEST)


@pytest.mark.parametrize("refit, search, keep", [
    ([-1.0, -2.0, -1.5], [-1.0, -2.0, -1.5], True),      # equal: kept
    ([-1.1, -2.1, -1.6], [-1.0, -2.0, -1.5], False),     # worse on every row: replaced
    ([-1.5, -1.0, -2.0], [-1.0, -2.0, -1.5], True),      # mixed, within the noise
    ([-np.inf, -1.0, -1.0], [-1.0, -2.0, -1.5], False),  # a non-finite refit: replaced
    ([-1.0, -1.0, -1.0], [np.nan, -2.0, -1.5], True),    # a non-finite search model
])
def test_the_guard_keeps_the_refit_unless_clearly_worse(refit, search, keep):
    assert auto_refit.keep_refit(refit, search)[0] is keep


def test_the_guard_slice_is_half_the_validation_rows_or_none():
    rows = np.arange(10, 34)
    assert list(auto_refit.guard_rows(rows)) == list(range(10, 22))
    assert len(auto_refit.guard_rows(rows[:3])) == 2 and len(auto_refit.guard_rows(rows[:2])) == 0

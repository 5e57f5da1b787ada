"""`auto`'s guarded refit: the chosen candidate retrained on the training rows, checked on rows
it never saw against the search's own model, which replaces a refit that collapsed.

The search (`zoo.run.auto.select`) trains each candidate on a fit part of the training rows
and keeps the chosen one's weights at its best validation check. The refit trains the same
candidate afresh on more rows, for the chosen number of epochs, and is usually the better
model; but a refit can also end far from its search run (BENCHMARKS.md: one energy split
scored -0.64 on validation in the search and -3.43 on the test rows after the refit).
Nothing trained on the test rows can tell, so the refit leaves out a guard slice:
GUARD_SHARE of the validation rows, drawn at random by the search's seed. The refit trains
on every other training row (the fit part and the rest of the validation rows); then both
models predict the guard slice, and the refit is kept unless its mean log-likelihood there
(in the data's units, row by row) is below the search model's by more than GUARD_SES
standard errors of the paired differences, or is not finite. The search model was
early-stopped on the validation rows the guard slice belongs to, which favours it: the
guard errs towards replacing a refit, not keeping a bad one.

`RefitOutcome.record` says what happened (both log-likelihoods, the difference and its
standard error, the rows, which model was kept) for results.json.
"""

import math
import typing

import keras
import numpy as np

from tfp_bnn.data import Standardizer
from zoo.run import scoring

# Share of the search's validation rows the refit leaves out to be checked on, and the
# number of standard errors its mean log-likelihood there may fall below the search model's.
GUARD_SHARE = 0.5
GUARD_SES = 2.0
# At least this many guard rows (a mean and a standard error); fewer validation rows: no
# guard slice, and the refit trains on every row unchecked (recorded).
MIN_GUARD_ROWS = 2


class RefitOutcome(typing.NamedTuple):
    """The kept model, the standardisers its data go through, and the guard's record."""

    model: keras.Model
    x_scaler: Standardizer
    y_scaler: Standardizer
    record: dict


def guard_rows(validation_rows):
    """The guard slice: the first GUARD_SHARE of the search's (already shuffled) validation
    rows; empty if that is under MIN_GUARD_ROWS."""
    count = int(round(GUARD_SHARE * len(validation_rows)))
    return validation_rows[:count] if count >= MIN_GUARD_ROWS else validation_rows[:0]


def keep_refit(refit_ll, search_ll):
    """(keep the refit?, mean difference, its standard error) from per-row log-likelihoods.

    The refit is kept when its values are finite and the paired mean difference refit -
    search is not below -GUARD_SES standard errors (or is >= 0 where the rows do not vary),
    or when the search model's values are not finite.
    """
    refit_ll, search_ll = np.asarray(refit_ll, np.float64), np.asarray(search_ll, np.float64)
    if not np.all(np.isfinite(refit_ll)):
        return False, None, None
    if not np.all(np.isfinite(search_ll)):
        return True, None, None
    difference = refit_ll - search_ll
    mean = float(np.mean(difference))
    se = float(np.std(difference, ddof=1) / math.sqrt(len(difference)))
    return mean >= -GUARD_SES * se, mean, se


def _fit_scalers(x, y):
    return Standardizer().fit(x), Standardizer().fit(y)


def _row_log_likelihoods(model, scalers, x, y, num_samples):
    """Per-row predictive log-likelihood of raw targets `y` at raw inputs `x`."""
    prediction = scoring.predict_in_data_units(model, x, *scalers, num_samples)
    return np.asarray(prediction.log_likelihood(y), np.float64).reshape(-1)


def guarded_refit(selection, x, y, fit_rows, validation_rows, seed, num_samples):
    """Refits the chosen candidate of `selection` and keeps it or the search's model.

    Args:
        selection: `zoo.run.auto.Selection` (its chosen trial holds the search model's
            weights at the best check).
        x, y: all training rows and targets, raw (data units).
        fit_rows, validation_rows: the search's cut (`zoo.run.auto.cut`).
        seed: the search's seed (initial weights, noise and shuffling of the refit).
        num_samples: Monte Carlo samples T of each model's guard predictive.

    Returns:
        A `RefitOutcome`.
    """
    candidate, trial = selection.candidate, selection.chosen_trial
    guard = guard_rows(validation_rows)
    rows = np.setdiff1d(np.arange(len(x)), guard)  # sorted: the rows in their order
    scalers = _fit_scalers(x[rows], y[rows])
    x_std = scalers[0].transform(x[rows]).astype("float32")
    y_std = scalers[1].transform(y[rows]).astype("float32")
    per_epoch = candidate.steps_per_epoch(len(rows))
    model = candidate.build(x.shape[1:], len(rows), seed, selection.max_epochs * per_epoch)
    _, seconds = scoring.fit(model, x_std, y_std, selection.epochs,
                             candidate.batch_for(len(rows)), seed=seed, seeded_batches=True)
    record = {"refit_rows": int(len(rows)), "guard_rows": int(len(guard)),
              "refit_seconds": seconds, "kept": "refit"}
    if not len(guard):
        return RefitOutcome(model, *scalers, record)
    search_scalers = _fit_scalers(x[fit_rows], y[fit_rows])
    search_model = candidate.build(x.shape[1:], len(fit_rows), seed, selection.max_epochs
                                   * candidate.steps_per_epoch(len(fit_rows)))
    search_model.set_weights(trial.weights)
    refit_ll = _row_log_likelihoods(model, scalers, x[guard], y[guard], num_samples)
    search_ll = _row_log_likelihoods(search_model, search_scalers, x[guard], y[guard],
                                     num_samples)
    keep, difference, se = keep_refit(refit_ll, search_ll)
    record.update(refit_ll=_finite_mean(refit_ll), search_ll=_finite_mean(search_ll),
                  difference=difference, difference_se=se,
                  kept="refit" if keep else "search_model")
    if keep:
        return RefitOutcome(model, *scalers, record)
    return RefitOutcome(search_model, *search_scalers, record)


def _finite_mean(values):
    mean = float(np.mean(values))
    return mean if math.isfinite(mean) else None

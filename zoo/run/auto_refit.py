"""`auto`'s guarded refit: the stack's members retrained on the training rows, checked on rows
they never saw against the search's own models, which replace a refit that collapsed.

The search (`zoo.run.auto.select`) trains each candidate on a fit part of the training rows
and keeps its weights at its best validation check; `auto` mixes the candidates with
stacking weights (`zoo.run.auto_stack`). The refit trains each member of the stack afresh on
more rows, for its own best number of epochs, and is usually the better model; but a refit
can also end far from its search run (BENCHMARKS.md: one energy split scored -0.64 on
validation in the search and -3.43 on the test rows after the refit). Nothing trained on the
test rows can tell, so the refit leaves out a guard slice: GUARD_SHARE of the validation
rows, drawn at random by the search's seed. The refit trains on every other training row
(the fit part and the rest of the validation rows); then the refitted stack and the stack of
the search's models (the same weights) predict the guard slice, and the refit is kept unless
its mean log-likelihood there (in the data's units, row by row) is below the search stack's
by more than GUARD_SES standard errors of the paired differences, or is not finite. The
search models were early-stopped (and the weights fitted) on the validation rows the guard
slice belongs to, which favours them: the guard errs towards replacing a refit, not keeping
a bad one.

`RefitOutcome.record` says what happened (the members and their weights, both
log-likelihoods, the difference and its standard error, the rows, which stack was kept) for
results.json.
"""

import math
import typing

import numpy as np

from tfp_bnn.data import Standardizer
from zoo.run import scoring
from zoo.run.auto_stack import Stack

# Share of the search's validation rows the refit leaves out to be checked on, and the
# number of standard errors its mean log-likelihood there may fall below the search model's.
GUARD_SHARE = 0.5
GUARD_SES = 2.0
# At least this many guard rows (a mean and a standard error); fewer validation rows: no
# guard slice, and the refit trains on every row unchecked (recorded).
MIN_GUARD_ROWS = 2


class RefitOutcome(typing.NamedTuple):
    """The kept `zoo.run.auto_stack.Stack` (its standardisers with it) and the guard's
    record."""

    stack: Stack
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


def _stack_log_likelihoods(stack, x, y, num_samples):
    """Per-row predictive log-likelihood of raw targets `y` at raw inputs `x`."""
    return np.asarray(stack.predict(x, num_samples).log_likelihood(y), np.float64).reshape(-1)


def _refit(candidate, trial, x, y, rows, seed):
    """`candidate` trained afresh on `rows` for the trial's best epochs, with the search's
    decay length (epochs); returns (model, seconds)."""
    per_epoch = candidate.steps_per_epoch(len(rows))
    model = candidate.build(x.shape[1:], len(rows), seed, trial.max_epochs * per_epoch)
    _, seconds = scoring.fit(model, x, y, trial.best_epochs, candidate.batch_for(len(rows)),
                             seed=seed, seeded_batches=True)
    return model, seconds


def search_model(candidate, trial, input_shape, num_fit, seed):
    """The search's model of `candidate`: built for the fit part, with the trial's weights
    at its best check."""
    model = candidate.build(input_shape, num_fit, seed,
                            trial.max_epochs * candidate.steps_per_epoch(num_fit))
    model.set_weights(trial.weights)
    return model


def guarded_refit(members, x, y, fit_rows, validation_rows, seed, num_samples):
    """Refits the members of a stack and keeps the refit or the search's stack.

    Args:
        members: (candidate, trial, weight) per member: its `Candidate`, its search `Trial`
            (the search model's weights at its best check) and its stacking weight (> 0,
            summing to 1 over the members).
        x, y: all training rows and targets, raw (data units).
        fit_rows, validation_rows: the search's cut (`zoo.run.auto.cut`).
        seed: the search's seed (initial weights, noise and shuffling of each refit).
        num_samples: Monte Carlo samples T of each stack's guard predictive.

    Returns:
        A `RefitOutcome`.
    """
    candidates, trials, weights = zip(*members)
    names = tuple(c.name for c in candidates)
    guard = guard_rows(validation_rows)
    rows = np.setdiff1d(np.arange(len(x)), guard)  # sorted: the rows in their order
    scalers = _fit_scalers(x[rows], y[rows])
    x_std = scalers[0].transform(x[rows]).astype("float32")
    y_std = scalers[1].transform(y[rows]).astype("float32")
    models, seconds = [], 0.0
    for candidate, trial in zip(candidates, trials):
        model, took = _refit(candidate, trial, x_std, y_std, rows, seed)
        models.append(model)
        seconds += took
    refit = Stack(models, weights, *scalers, names=names)
    record = {"members": refit.record(), "refit_rows": int(len(rows)),
              "guard_rows": int(len(guard)), "refit_seconds": seconds, "kept": "refit"}
    if not len(guard):
        return RefitOutcome(refit, record)
    search = Stack([search_model(c, t, x.shape[1:], len(fit_rows), seed)
                    for c, t in zip(candidates, trials)],
                   refit.weights, *_fit_scalers(x[fit_rows], y[fit_rows]), names=names)
    refit_ll = _stack_log_likelihoods(refit, x[guard], y[guard], num_samples)
    search_ll = _stack_log_likelihoods(search, x[guard], y[guard], num_samples)
    keep, difference, se = keep_refit(refit_ll, search_ll)
    record.update(refit_ll=_finite_mean(refit_ll), search_ll=_finite_mean(search_ll),
                  difference=difference, difference_se=se,
                  kept="refit" if keep else "search_model")
    return RefitOutcome(refit if keep else search, record)


def _finite_mean(values):
    mean = float(np.mean(values))
    return mean if math.isfinite(mean) else None

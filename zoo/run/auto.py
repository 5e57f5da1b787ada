"""Automatic model selection for regression: `auto` chooses a model from the training rows.

`select(x, y)` cuts the training rows at random (seeded) into a fit part and a validation
part, standardises both with the fit part's statistics, trains every candidate of
`CANDIDATES` on the fit part and ranks them by the validation log-likelihood in the
target's original units, with early stopping on that log-likelihood (the epoch count of
the best check is kept). The choice follows the one-standard-error rule (`choose`): the
first candidate in prior order whose log-likelihood is within SELECTION_SE standard
errors (of the paired per-row differences) of the best one's. `auto(x_train, y_train,
x_test, y_test)` then mixes the candidates with stacking weights fitted on the same
validation rows (`zoo.run.auto_stack`; `stack=False` keeps the one chosen), refits each
member on the training rows for its own best epochs and scores the test rows, which the
selection never reads.

The protocol is that of Hernandez-Lobato and Adams (2015) and Gal and Ghahramani (2016,
ICML), who chose hyperparameters on a validation cut of each split's training rows; the
early stopping on validation likelihood is that of Lakshminarayanan et al. (2017,
NeurIPS), the candidates the zoo's families (MC dropout, Flipout, Bayes by Backprop, deep
ensembles, DVI by Wu et al. 2019, ICLR). Deviation from those papers: one random cut
rather than a k-fold or Bayesian-optimisation search, so the whole search fits a compute
budget on 2 cores.

The search counts work, not time: each candidate's run is a number of training steps
(minibatch updates) set by the data's size, so the choice depends on the seed and the data
alone, not on how busy the machine is. By default every candidate trains its full run
(about 50,000 steps in all on a table of up to 3,200 training rows, up to 4 times that on
large ones: `zoo.run.candidates`); `budget_steps` caps the whole search: a candidate
whose run would pass it trains until it is spent (its learning-rate schedule unchanged)
and the rest are skipped, in list order, still reproducibly.
`budget_minutes` is an optional wall-time cap on top, for a user in a hurry; a search it
cuts is no longer reproducible, and says so (`Selection.minutes_cut`).

Each candidate (`zoo.run.candidates`) trains for at most `Candidate.max_epochs`: its step
budget / batches per epoch on a table of up to 100 batches, and as many epochs (more
steps) on a larger one, so the training grows with the data. The validation predictive is
checked NUM_CHECKS times over that run (T = VALIDATION_SAMPLES Monte Carlo samples; one
pass for a sampling-free model, the M members of a deterministic ensemble:
`zoo.run.scoring.predict`); a candidate stops after PATIENCE checks without a better
log-likelihood, and its weights at the best check are kept (`zoo.run._auto_trial`).

The refit is guarded (`zoo.run.auto_refit`): it trains on all training rows but a guard
slice of the validation rows, and is kept only if its log-likelihood on that slice is not
clearly below that of the stack of the search's own models, which then replaces it.

`auto`'s docstring has an example that runs in a few seconds.
"""

import dataclasses
import math
import time
import typing

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data import Standardizer
from tfp_bnn.predict import limits
from zoo.run import auto_conformal
from zoo.run import auto_refit
from zoo.run import auto_stack
from zoo.run import scoring
from zoo.run._auto_trial import NUM_CHECKS  # noqa: F401 - `auto.NUM_CHECKS` is documented
from zoo.run._auto_trial import PATIENCE  # noqa: F401 - `auto.PATIENCE` is documented
from zoo.run._auto_trial import VALIDATION_SAMPLES
from zoo.run._auto_trial import Trial  # noqa: F401 - part of `Selection`'s public record
from zoo.run._auto_trial import run_trial
from zoo.run.auto_rule import SELECTION_SE
from zoo.run.auto_rule import choose
from zoo.run.candidates import CANDIDATES
from zoo.run.candidates import Candidate
from zoo.run.candidates import check_candidates
from zoo.run.candidates import plain

# Training steps of the whole search: None, every candidate's full run (a budget cuts the
# tail of the candidate list).
DEFAULT_BUDGET_STEPS = None
VALIDATION_FRACTION = 0.2
# Each of the fit and validation parts needs this many rows (a standard deviation, a score).
MIN_PART_ROWS = 2


@dataclasses.dataclass(frozen=True)
class Selection:
    """The outcome of `select`: the chosen candidate and every trial.

    Attributes:
        candidate: the chosen `Candidate`; epochs: its best epoch count.
        trials: a `Trial` per candidate tried, in the order tried.
        budget_hit: the budget (steps, or the minutes cap) stopped the search; skipped:
            the names of the candidates it left untried.
        minutes_cut: the wall-time cap stopped it (the choice may then differ from run to
            run); steps: the training steps the search took.
        seed, validation_fraction, budget_steps, budget_minutes, num_fit, num_validation,
            seconds: the search's arguments, part sizes and wall time.
        selection_se: the rule's tolerance in standard errors (`choose`); gaps: per
            scored trial, {"name", "gap", "se"}: the best mean's lead over it on the
            validation rows and the standard error of that paired difference.
    """

    candidate: Candidate
    epochs: int
    trials: tuple
    budget_hit: bool
    skipped: tuple
    seed: int
    validation_fraction: float
    budget_minutes: typing.Optional[float]
    num_fit: int
    num_validation: int
    seconds: float
    budget_steps: typing.Optional[int] = DEFAULT_BUDGET_STEPS
    steps: int = 0
    minutes_cut: bool = False
    selection_se: float = SELECTION_SE
    gaps: tuple = ()

    @property
    def max_epochs(self):
        """The chosen candidate's epoch budget in the search (its cosine decay's length)."""
        return self.chosen_trial.max_epochs

    @property
    def chosen_trial(self):
        """The `Trial` of the chosen candidate."""
        return next(t for t in self.trials if t.name == self.candidate.name)

    def to_json(self):
        """A dict of plain JSON types (no NaN: non-finite scores are None)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields.update(candidate=self.candidate.to_json(),
                      trials=[t.to_json() for t in self.trials])
        return plain(fields)


def _table(name, values, rows=None, target=False):
    """`values` as a finite float64 [rows, columns] array ([rows] for a `target`)."""
    values = check.array(name, values)
    if target and values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or 0 in values.shape:
        raise ValueError(f"`{name}` must be a non-empty 2-D table (rows, columns), got shape "
                         f"{values.shape}.")
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"`{name}` must be numeric, got dtype {values.dtype}.")
    if rows is not None and len(values) != rows:
        raise ValueError(f"`{name}` has {len(values)} rows, the inputs {rows}.")
    if not np.all(np.isfinite(values)):
        row = int(np.argwhere(~np.isfinite(values))[0][0])
        raise ValueError(f"`{name}` has a NaN or infinite value (first in row {row}).")
    if target and values.shape[1] != 1:
        raise ValueError(f"`{name}` must hold one target per row, got shape {values.shape}.")
    return values.astype(np.float64)[:, 0] if target else values.astype(np.float64)


def check_budgets(budget_steps, budget_minutes):
    """(budget_steps, budget_minutes), each None or checked: a positive int of steps, a
    finite number of minutes > 0; else ValueError naming it."""
    if budget_steps is not None:
        budget_steps = check.integer("budget_steps", budget_steps)
    if budget_minutes is not None:
        budget_minutes = check.positive("budget_minutes", budget_minutes)
    return budget_steps, budget_minutes


def _check_search(x, y, seed, budget_steps, budget_minutes, candidates, validation_fraction):
    x = _table("x", x)
    y = _table("y", y, rows=len(x), target=True)
    seed = check.seed(seed)
    budget_steps, budget_minutes = check_budgets(budget_steps, budget_minutes)
    fraction = check.number("validation_fraction", validation_fraction, 0.0, 1.0, True, True)
    held = int(round(len(x) * fraction))
    if min(held, len(x) - held) < MIN_PART_ROWS:
        raise ValueError(f"`x` has {len(x)} rows: too few to hold out {fraction:.0%} for "
                         f"validation with at least {MIN_PART_ROWS} rows in each part.")
    candidates = check_candidates(candidates)
    first_epoch = candidates[0].steps_per_epoch(len(x) - held)
    if budget_steps is not None and budget_steps < first_epoch:
        raise ValueError(f"`budget_steps` is {budget_steps}: below one epoch of the first "
                         f"candidate on {len(x) - held} rows ({first_epoch} steps).")
    return x, y, seed, budget_steps, budget_minutes, candidates, fraction, held


def _scaled(x_scaler, y_scaler, x, y):
    return (x_scaler.transform(x).astype("float32"),
            y_scaler.transform(y).astype("float32"))


def cut(num_rows, seed, held):
    """(fit rows, validation rows) of the search: `held` rows at random (seeded) held out."""
    order = np.random.default_rng(seed).permutation(num_rows)
    return order[held:], order[:held]


def select(x, y, seed=0, budget_steps=DEFAULT_BUDGET_STEPS, budget_minutes=None,
           candidates=CANDIDATES, validation_fraction=VALIDATION_FRACTION, verbose=False,
           selection_se=SELECTION_SE):
    """Chooses a candidate and its epochs on a validation cut of the training rows.

    Args:
        x: training inputs [n, d], raw (not standardised); y: targets [n] or [n, 1].
        seed: int >= 0: the cut, initial weights, noise and shuffling.
        budget_steps: None (every candidate's full run), or the training steps of the
            whole search (an int >= 1): a candidate whose run would pass it trains
            until it is spent; then no further candidate starts.
        budget_minutes: None, or a wall-time cap of the search: past it no further
            candidate starts and the one training stops at its next check (recorded;
            the choice then depends on the machine's speed and load).
        candidates: `Candidate`s, best first (what a spent budget skips is the tail).
        validation_fraction: in (0, 1): share of the rows held out.
        verbose: print one line per trial.
        selection_se: number >= 0: the one-standard-error rule's tolerance (`choose`);
            0 chooses the best validation mean.

    Returns:
        A `Selection`, the same for the same data, seed and arguments unless the minutes
        cap cut it.
    """
    x, y, seed, budget_steps, budget_minutes, candidates, fraction, held = _check_search(
        x, y, seed, budget_steps, budget_minutes, candidates, validation_fraction)
    selection_se = check.number("selection_se", selection_se, low=0.0)
    begin = time.perf_counter()
    deadline = math.inf if budget_minutes is None else begin + budget_minutes * 60.0
    fit_rows, val_rows = cut(len(x), seed, held)
    x_scaler, y_scaler = Standardizer().fit(x[fit_rows]), Standardizer().fit(y[fit_rows])
    fit = _scaled(x_scaler, y_scaler, x[fit_rows], y[fit_rows])
    validation = (x_scaler.transform(x[val_rows]).astype("float32"), y[val_rows], y_scaler)
    trials, used, minutes_cut = [], 0, False
    for index, candidate in enumerate(candidates):
        if index and time.perf_counter() >= deadline:
            minutes_cut = True
            break
        left = None if budget_steps is None else budget_steps - used
        if left is not None and left < candidate.steps_per_epoch(len(fit_rows)):
            break  # not one epoch left
        trial, cut_now = run_trial(candidate, fit, validation, seed, left, deadline)
        trials.append(trial)
        used, minutes_cut = used + trial.steps, minutes_cut or cut_now
        if verbose:
            t = trials[-1]
            print(f"auto: {t.name}: validation LL {t.log_likelihood}, RMSE {t.rmse}, "
                  f"best epochs {t.best_epochs}/{t.max_epochs}, {t.steps} steps, "
                  f"{t.seconds:.0f}s", flush=True)
    scored = [t for t in trials if t.log_likelihood is not None]
    if not scored:
        raise ValueError("auto: no candidate reached a finite validation log-likelihood "
                         f"(tried {[t.name for t in trials]}).")
    best, gaps = choose(scored, selection_se)
    if verbose and best is not max(scored, key=lambda t: t.log_likelihood):
        print(f"auto: {best.name} kept: the best mean leads it by less than "
              f"{selection_se:g} standard error(s)", flush=True)
    skipped = tuple(c.name for c in candidates[len(trials):])
    return Selection(next(c for c in candidates if c.name == best.name), best.best_epochs,
                     tuple(trials), bool(skipped) or any(t.cut_by_budget for t in trials),
                     skipped, seed, fraction, budget_minutes, len(fit_rows), len(val_rows),
                     time.perf_counter() - begin, budget_steps, used, minutes_cut,
                     selection_se, gaps)


class AutoResult(typing.NamedTuple):
    """What `auto` returns: the kept stack (`zoo.run.auto_stack.Stack`: the refitted members
    and their weights, or the search's own models where the guard replaced the refit), the
    selection, the test scores (or None), the standardisers the stack's members expect
    their data through, the refit guard's record (`zoo.run.auto_refit`), and the test
    coverage and width of conformal intervals calibrated on the guard rows
    (`zoo.run.auto_conformal`; None without test rows or with too few guard rows)."""

    stack: auto_stack.Stack
    selection: Selection
    scores: typing.Optional[dict]
    x_scaler: Standardizer
    y_scaler: Standardizer
    refit: typing.Optional[dict] = None
    conformal: typing.Optional[dict] = None

    @property
    def model(self):
        """The kept Keras model of a one-member stack (`stack=False`, or all the weight on
        one candidate); a stack of several members has no one model: use `stack`."""
        if len(self.stack.members) != 1:
            raise ValueError(f"auto kept a stack of {len(self.stack.members)} models "
                             f"({', '.join(self.stack.names)}): use `.stack` (its "
                             "`.members` and `.weights`), or `.predict` for its predictive.")
        return self.stack.members[0]

    def predict(self, x, num_samples=100):
        """The predictive distribution at raw inputs `x`, in the target's units."""
        return self.stack.predict(_table("x", x), num_samples)


def auto(x_train, y_train, x_test=None, y_test=None, seed=0,
         budget_steps=DEFAULT_BUDGET_STEPS, budget_minutes=None, num_samples=100,
         verbose=False, candidates=CANDIDATES, selection_se=SELECTION_SE, stack=True):
    """`select` on the training rows, a guarded refit of the stack, score the test rows.

    The candidates' validation log-densities give the stacking weights
    (`zoo.run.auto_stack`); with `stack=False` the one-standard-error choice alone is
    kept (weight 1). The refit (`zoo.run.auto_refit`) builds each member on the training
    rows but a guard slice of the validation rows, standardised with their statistics,
    with its search run's cosine decay length (in epochs), and trains it for its best
    epochs, so its learning rate follows the search's run up to the best check; the epochs
    stay, so the steps grow with the rows. The refitted stack is kept unless it does
    clearly worse than the stack of the search's own models on the guard slice, which then
    replaces it.

    Args:
        x_train: raw training inputs [n, d] (not standardised).
        y_train: raw training targets [n] or [n, 1].
        x_test: raw test inputs, or None; read only to score the kept model.
        y_test: raw test targets, or None (given exactly when `x_test` is).
        seed: int >= 0: the validation cut, initial weights, noise and shuffling.
        budget_steps: None, or the training steps of the search (see `select`).
        budget_minutes: None, or a wall-time cap of the search (see `select`).
        num_samples: T, Monte Carlo samples of the test predictive (at most
            1,000,000, as in `tfp_bnn.predict`; checked with the test rows'
            storage before the search starts).
        verbose: print one line per trial.
        candidates: `Candidate`s, best first (default `CANDIDATES`).
        selection_se: the search's one-standard-error tolerance (see `select`).
        stack: bool: mix the candidates (True) or keep the one chosen.

    Returns:
        `AutoResult(stack, selection, scores, x_scaler, y_scaler, refit, conformal)`;
        scores as `zoo.run.scoring.regression_scores` (plus predict and train seconds) or
        None; conformal as `zoo.run.auto_conformal.conformal_scores` or None.

    Example:
    >>> import zoo
    >>> from zoo.run.candidates import Candidate
    >>> x = np.random.rand(60, 3).astype("float32")
    >>> y = x.sum(axis=1) + 0.1 * np.random.randn(60)
    >>> tiny = [Candidate("small_dropout", "mc_dropout_mlp", {"hidden_units": (8,)}, steps=10)]
    >>> result = zoo.auto(x[:50], y[:50], x[50:], y[50:], seed=0, candidates=tiny, num_samples=10)
    >>> result.selection.candidate.name, sorted(result.scores)[:3]
    ('small_dropout', ['coverage_95', 'log_likelihood', 'mean_stddev'])
    >>> result.stack.record()   # one candidate: all the weight on it
    {'small_dropout': 1.0}
    >>> result.refit["guard_rows"], result.refit["refit_rows"]   # 5 of the 10 validation rows
    (5, 45)
    >>> prediction = result.predict(x[50:52])  # in the data's units
    >>> prediction.mean.shape
    (2, 1)
    """
    num_samples = check.integer("num_samples", num_samples, maximum=limits.MAX_NUM_SAMPLES)
    x, y, seed, budget_steps, budget_minutes, candidates, _, held = _check_search(
        x_train, y_train, seed, budget_steps, budget_minutes, candidates, VALIDATION_FRACTION)
    selection_se = check.number("selection_se", selection_se, low=0.0)
    if (x_test is None) != (y_test is None):
        raise ValueError("`x_test` and `y_test` go together: give both or neither.")
    if x_test is not None:
        x_test = _table("x_test", x_test)
        if x_test.shape[1] != x.shape[1]:
            raise ValueError(f"`x_test` has {x_test.shape[1]} columns, `x_train` "
                             f"{x.shape[1]}.")
        y_test = _table("y_test", y_test, rows=len(x_test), target=True)
        # The test predictive keeps T x N sampled means and variances: refused now,
        # not after the search and the refit.
        limits.check_storage((2, num_samples, len(x_test)), np.float64,
                             "The test predictive's sampled means and variances")
    stack = check.boolean("stack", stack)
    selection = select(x, y, seed, budget_steps, budget_minutes, candidates, verbose=verbose,
                       selection_se=selection_se)
    members = auto_stack.members(selection.trials, candidates) if stack else (
        (selection.candidate, selection.chosen_trial, 1.0),)
    if verbose:
        print("auto: stack " + ", ".join(f"{c.name} {w:.2f}" for c, _, w in members),
              flush=True)
    fit_rows, validation_rows = cut(len(x), seed, held)
    kept = auto_refit.guarded_refit(members, x, y, fit_rows, validation_rows, seed,
                                    VALIDATION_SAMPLES)
    if verbose and kept.record["kept"] != "refit":
        print(f"auto: the refit scored {kept.record['refit_ll']} on the guard rows against "
              f"{kept.record['search_ll']} for the search's models, which replace it",
              flush=True)
    scores = intervals = None
    if x_test is not None:
        begin = time.perf_counter()
        prediction = kept.stack.predict(x_test, num_samples)
        scores = scoring.regression_scores(prediction, y_test)
        scores.update(predict_seconds=time.perf_counter() - begin,
                      train_seconds=kept.record["refit_seconds"])
        guard = auto_refit.guard_rows(validation_rows)
        intervals = auto_conformal.conformal_scores(kept.stack, x[guard], y[guard],
                                                    prediction, y_test, num_samples)
    return AutoResult(kept.stack, selection, scores, kept.stack.x_scaler,
                      kept.stack.y_scaler, plain(kept.record),
                      None if intervals is None else plain(intervals))

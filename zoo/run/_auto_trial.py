"""One candidate's run in `zoo.run.auto`'s search: its `Trial` record and how it is trained.

`run_trial` trains a candidate on the search's fit part for its `Candidate.max_epochs`
(or what the search's step budget leaves), scoring the validation predictive NUM_CHECKS
times over the run (T = VALIDATION_SAMPLES Monte Carlo samples, in the data's units). It
stops after PATIENCE checks without a better log-likelihood, or at a non-finite one, or at
the first check past a wall-time deadline, and keeps the weights of the best check, which
`zoo.run.auto_refit` falls back on.
"""

import dataclasses
import math
import time
import typing

import keras
import numpy as np

from zoo.run import scoring
from zoo.run.candidates import plain

VALIDATION_SAMPLES = 20
NUM_CHECKS = 20
PATIENCE = 5


def _finite_or_none(value):
    return float(value) if value is not None and math.isfinite(value) else None


@dataclasses.dataclass(frozen=True)
class Trial:
    """One candidate's search: best validation scores (original units) and when.

    `curve` holds (epoch, log-likelihood, rmse) per check, None for a non-finite score;
    `steps` the training steps it took; `cut_by_budget` says the budget (steps, or the
    minutes cap) stopped it before its own end. `weights` are the model's weights at the
    best check and `row_log_likelihoods` its log-likelihood of each validation row (in
    the data's units; their mean is `log_likelihood`), which the search's choice pairs
    across candidates; neither is compared nor in the JSON.
    """

    name: str
    log_likelihood: typing.Optional[float]
    rmse: typing.Optional[float]
    best_epochs: int
    max_epochs: int
    seconds: float
    curve: tuple
    cut_by_budget: bool = False
    steps: int = 0
    batch_size: int = 0
    weights: typing.Optional[list] = dataclasses.field(default=None, compare=False,
                                                       repr=False)
    row_log_likelihoods: typing.Optional[np.ndarray] = dataclasses.field(
        default=None, compare=False, repr=False)

    def to_json(self):
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("weights", "row_log_likelihoods")}
        return plain(fields)


class _ValidationChecks(keras.callbacks.Callback):
    """Scores the validation predictive every `every` epochs; early stopping, the best
    check's weights, and the wall-time cap."""

    def __init__(self, x, y_raw, scaler, every, last, deadline):
        super().__init__()
        self.x, self.y_raw, self.scaler = x, y_raw, scaler
        self.every, self.last, self.deadline = every, last, deadline
        self.curve, self.best, self.best_check, self.cut = [], None, 0, False
        self.epochs_done, self.best_weights, self.best_rows = 0, None, None

    def on_epoch_end(self, epoch, logs=None):
        done = self.epochs_done = epoch + 1
        if done % self.every and done != self.last:
            return
        prediction, _ = scoring.predict(self.model, self.x, VALIDATION_SAMPLES)
        rows, rmse = scoring.row_log_likelihoods(prediction, self.y_raw,
                                                 float(self.scaler.mean), float(self.scaler.std))
        ll, rmse = _finite_or_none(np.mean(rows)), _finite_or_none(rmse)
        self.curve.append((done, ll, rmse))
        if ll is not None and (self.best is None or ll > self.best[1]):
            self.best, self.best_check = (done, ll, rmse), len(self.curve) - 1
            # Copies: on TensorFlow `get_weights` may hand out views of the variables' buffers.
            self.best_weights = [np.array(w) for w in self.model.get_weights()]
            self.best_rows = rows
        if ll is None or len(self.curve) - 1 - self.best_check >= PATIENCE:
            self.model.stop_training = True  # diverged, or no better for PATIENCE checks
        elif time.perf_counter() >= self.deadline and done != self.last:
            self.cut = self.model.stop_training = True


def run_trial(candidate, fit, validation, seed, steps_left, deadline):
    """Trains `candidate` on `fit` with checks on `validation`, within `steps_left`
    training steps (None: no limit) and the `deadline`; returns its `Trial` and whether the
    deadline cut it."""
    begin = time.perf_counter()
    (x, y), (x_val, y_val_raw), y_scaler = fit, validation[:2], validation[2]
    batch_size, per_epoch = candidate.batch_for(len(x)), candidate.steps_per_epoch(len(x))
    epochs = candidate.max_epochs(len(x))
    allowed = epochs if steps_left is None else min(epochs, steps_left // per_epoch)
    model = candidate.build(x.shape[1:], len(x), seed, epochs * per_epoch)
    checks = _ValidationChecks(x_val, y_val_raw, y_scaler, max(1, epochs // NUM_CHECKS),
                               allowed, deadline)
    scoring.fit(model, x, y, allowed, batch_size, seed=seed, callbacks=[checks],
                seeded_batches=True)
    keras.backend.clear_session()
    best = checks.best or (checks.curve[-1][0], None, None)
    steps_cut = allowed < epochs and checks.epochs_done == allowed
    return Trial(candidate.name, best[1], best[2], best[0], epochs,
                 time.perf_counter() - begin, tuple(checks.curve), checks.cut or steps_cut,
                 checks.epochs_done * per_epoch, batch_size, checks.best_weights,
                 checks.best_rows), checks.cut

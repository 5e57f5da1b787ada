"""`python -m zoo train` and `evaluate`: train a ready model, score it, keep everything.

A run directory holds, when the run finished:

    config.json      what was run (model, dataset, split, seed, epochs, ...)
    results.json     test metrics in the data's units, timings, versions
    history.json     per-epoch training logs (loss, and data_loss / kl)
    training.png     the training curves
    predictions.png  regression: observed vs predicted, 95% intervals
    reliability.png  classification: the reliability diagram
    preprocessing.json  the training split's scaling statistics (x_mean,
                     x_std; y_mean, y_std for regression)
    model.keras      the trained model (loads with safe_mode=True), taking
                     raw inputs and answering in the data's units
    saved_model/     SavedModel serving the Monte Carlo predictive of raw
                     inputs: serve(x, num_samples) returns the mean, stddev
                     and variances in the target's units

Everything is written into a staging directory first and moved in at the
end, `results.json` last, so a directory with results.json is complete and
an interrupted run leaves no half-written file among them. Checkpoints
(`.backup/`, written at every epoch end) let an interrupted run resume when
started again with the same arguments; it then finishes with the history,
weights and metrics of an uninterrupted run (the data order is a function
of seed and epoch, and the checkpoint holds the noise generators' state).
Arguments, data and model are all checked before anything is written.

The zoo never deletes or replaces a file it did not write: a run directory
is the zoo's only if the zoo created it or found it empty, and its marker
`.zoo-run` lists every name the zoo put there (see `zoo.run.run_dir`). One
`train` at a time per directory: a second one is refused (`.zoo-run.lock`).
A checkpoint resumes only with the same data (hashed), arguments, threads
and library versions. A failed write (disk full, permission lost) ends with
an OSError and keeps the last complete checkpoint.

If the loss turns non-finite, training stops in that batch and the run
directory keeps the last good state: `last_good.keras` (the model at the
end of the last finite epoch) and the checkpoint; no results are written.
"""

import math
import os
import time

import keras
import numpy as np

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn.callbacks import DivergenceGuard
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.callbacks import TrainingDiverged
from tfp_bnn.data import shuffled_epochs
from tfp_bnn.data import steps_per_epoch
from tfp_bnn.modes import kl_layers
from zoo.run import auto
from zoo.run import auto_choice
from zoo.run import datasets
from zoo.run import distribute
from zoo.run import flags
from zoo.models import registry
from zoo.run import outputs
from zoo.run import run_dir
from zoo.run import scoring
from zoo.run import fingerprint as run_fingerprint
from zoo.run.progress import progress
from zoo.run.fingerprint import set_threads  # noqa: F401 - `runner.set_threads` is public

BATCH_SIZE = 32
# The model name that asks the run to choose one (zoo.run.auto).
AUTO = "auto"
NUM_SAMPLES = 100
CLASSIFICATION_EPOCHS = 30
# Regression runs aim at about this many optimizer steps (small tables get
# more epochs, large ones fewer), clipped to [MIN_EPOCHS, MAX_EPOCHS].
TARGET_STEPS = 6000
MIN_EPOCHS = 40
MAX_EPOCHS = 400
LAST_GOOD = "last_good.keras"  # written when training diverges
# Minimum seconds between checkpoints: a save costs ~15 ms, a fifth of an
# epoch on the small tables; a killed run repeats at most this much.
CHECKPOINT_SECONDS = 2.0


def default_epochs(task: datasets.Task, batch_size: int = BATCH_SIZE) -> int:
    """Epochs when --epochs is not given: 30 for classification, ~6000 steps otherwise."""
    if task.task == "classification":
        return CLASSIFICATION_EPOCHS
    steps = steps_per_epoch(len(task.x_train), batch_size)
    return int(min(MAX_EPOCHS, max(MIN_EPOCHS, round(TARGET_STEPS / steps))))


def _check_out(out, strategy_object):
    """Refuses a bad --out before anything is written; returns this worker's directory."""
    workdir = distribute.worker_path(out, strategy_object)
    if workdir != os.path.abspath(os.fspath(out)):
        # Another worker of a multi-worker run: the chief owns `out` (its
        # marker and lock); this one works in its own directory below it.
        run_dir.check_contents(out, finished=None) if os.path.isdir(out) else None
    return run_dir.check(workdir)


def score(model, task: datasets.Task, num_samples=NUM_SAMPLES, raw_inputs=False):
    """Test metrics of `model` on `task`, in the data's units (`zoo.run.scoring.score`).

    `raw_inputs`: `model` takes the test inputs in the data's units and answers in the
    target's (a run's exported model, `zoo.run.outputs.in_data_units`); otherwise it takes
    them standardised and its predictions are mapped back with the task's statistics.

    Returns:
        (metrics dict, prediction). Regression: rmse, log_likelihood (mean
        nats per point), coverage_95, mean_stddev. Classification:
        accuracy, nll, ece (15 bins), brier. Both: num_samples, num_test.
    """
    x = task.x_test_original if raw_inputs else task.x_test
    if task.task == "regression":
        y, shift, scale = task.y_test_original.reshape(-1, 1), task.y_shift, task.y_scale
        if raw_inputs:
            shift, scale = 0.0, 1.0
    else:
        y, shift, scale = task.y_test, 0.0, 1.0
    result, prediction = scoring.score(model, x, y, task.task, num_samples,
                                       shift=shift, scale=scale)
    del result["predict_seconds"]
    result["num_samples"] = 1 if scoring.sampling_free(model) else num_samples
    result["num_test"] = int(len(task.x_test))
    return result, prediction


def _fit(model, task, config, workdir, strategy_object):
    """Fits with checkpoints, the divergence guard and a resumable data order.

    Returns the logs of all epochs (those before a resume come from the
    checkpoint).
    """
    epochs, batch_size, seed = config["epochs"], config["batch_size"], config["seed"]
    num_train = len(task.x_train)
    backup = distribute.backup_callback(workdir, strategy_object,
                                        fingerprint=run_fingerprint.fingerprint(config, task),
                                        delete_checkpoint=False,
                                        save_interval=config["checkpoint_seconds"],
                                        shared_files=auto_choice.CHECKPOINT_FILES)
    first = backup.restored_epoch()
    if first >= epochs:  # killed after training, before the results were written
        backup.restore(model)
        return backup.merged_history({})
    if first:
        print(f"resuming from the checkpoint after epoch {first}", flush=True)
    data = shuffled_epochs(task.x_train, task.y_train, batch_size, seed, epochs, first)
    if config["strategy"] == "multiworker":
        data = distribute.with_data_sharding(data)
    fit_verbose, shown = progress(config["verbose"], epochs)
    # The guard first: no NaN weights in a save; plain progress lines when piped.
    callbacks = [DivergenceGuard(), backup] + shown
    if kl_layers(model):
        callbacks.insert(0, KLScheduler(num_examples=num_train))
    history = model.fit(data, epochs=epochs, initial_epoch=first,
                        steps_per_epoch=steps_per_epoch(num_train, batch_size),
                        shuffle=False, verbose=fit_verbose, callbacks=callbacks)
    return backup.merged_history(history.history)


def _keep_last_good(model, error, directory, staging, chief):
    """After divergence: the last good model in out/last_good.keras; a message saying so."""
    kept = []
    if chief and error.last_good_epoch is not None:
        model.save(os.path.join(staging, LAST_GOOD))
        directory.move_in(os.path.join(staging, LAST_GOOD), LAST_GOOD)
        epochs = error.last_good_epoch
        kept.append(f"the model after {epochs} epoch{'' if epochs == 1 else 's'} in "
                    f"{os.path.join(directory.path, LAST_GOOD)}")
    backup = os.path.join(directory.path, distribute.BACKUP)
    if os.path.exists(backup):
        kept.append(f"the checkpoint in {backup}")
    kept = " and ".join(kept) if kept else "no model"
    return TrainingDiverged(
        f"{error.summary} Kept {kept}; no results were written. Try a smaller learning rate "
        "(--set learning_rate=...) with a new --out.", error.epoch, error.batch, error.what,
        error.value, error.last_good_epoch, error.summary)


def _auto_choice(task, key, backup_dir, verbose):
    """`zoo.run.auto_choice.run_choice` on the training rows of a regression table."""
    if task.task != "regression" or task.kind != "table":
        raise ValueError(f"Model 'auto' chooses among the zoo's regression models for tables; "
                         f"{task.name!r} is {task.task} on {task.kind} inputs: name a model.")
    # The targets in the data's units, so that the search ranks log-likelihoods in them.
    return auto_choice.run_choice(task.x_train, task.y_train * task.y_scale + task.y_shift, key,
                           backup_dir, name=task.name, verbose=verbose)


def train_and_evaluate(model_name, dataset, out, split=0, epochs=None, seed=0,
                       strategy="default", batch_size=None, num_samples=NUM_SAMPLES,
                       verbose=1, overrides=None, checkpoint_seconds=CHECKPOINT_SECONDS,
                       budget_steps=None, budget_minutes=None):
    """Trains `model_name` on `dataset`, scores it and writes the run directory.

    Every argument, the data and the model are checked before anything is
    written; a bad one raises ValueError and leaves nothing on disk. Training
    resumes from `out/.backup` when an earlier run with the same arguments
    was interrupted, and then ends with the same weights, history and
    metrics as an uninterrupted run. A non-finite loss raises
    `tfp_bnn.callbacks.TrainingDiverged` (a FloatingPointError) and keeps
    the last good model in `out/last_good.keras` and the checkpoint.

    Args:
        model_name: a name from `zoo.list_models()`, or "auto": a regression model and
            its settings chosen on the split's training rows (`zoo.run.auto.select`, within
            `budget_steps`) before the run trains it on all of them (unguarded: the run
            is the refit); the choice and every candidate's validation scores go into
            results.json ("selection"). The checkpoint keeps the choice: a resumed run
            trains it without searching again.
        dataset: a built-in name or a path (see `zoo.run.datasets.load`).
        out: the run directory (new, empty, or an interrupted run's).
        split: split index; epochs: None for `default_epochs`; seed: int.
        strategy: "default", "mirrored" or "multiworker" (TF_CONFIG).
        batch_size: global batch size (default 32; the chosen one for "auto");
            num_samples: T at test time.
        verbose: Keras' fit verbosity (1: progress bar).
        overrides: dict of builder arguments (see the builder's family in `zoo.models`).
        checkpoint_seconds: minimum seconds between checkpoints (0: at
            every epoch end); the last epoch is always saved.
        budget_steps: only for "auto": None (every candidate's full run) or a cap on the
            search's training steps; a named model refuses it.
        budget_minutes: only for "auto": an optional wall-time cap of the search (None:
            none); a named model refuses it.

    Returns:
        The results dict (also in out/results.json on the chief).
    """
    start = time.perf_counter()
    choose = model_name == AUTO
    if choose:
        given = [name for name, value in (("epochs", epochs), ("batch_size", batch_size),
                                          ("overrides", overrides)) if value]
        if given:
            raise ValueError(f"Model 'auto' chooses its own settings: `{given[0]}` does not "
                             "apply (name a model to set it).")
        budget_steps, budget_minutes = auto.check_budgets(budget_steps, budget_minutes)
    else:
        registry.get_spec(model_name)
        for flag, value in (("budget_steps", budget_steps), ("budget_minutes", budget_minutes)):
            if value is not None:
                raise ValueError(f"`{flag}` applies only to model 'auto' (a search within a "
                                 f"budget); {model_name!r} trains for `epochs`.")
    batch_size = check.integer("batch_size", BATCH_SIZE if batch_size is None else batch_size)
    num_samples = check.integer("num_samples", num_samples)
    seed = check.seed(seed)
    checkpoint_seconds = check.number("checkpoint_seconds", checkpoint_seconds, low=0.0)
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError(f"`overrides` must be a dict, got {type(overrides).__name__}.")
    taken = sorted(set(overrides or {}) & set(flags.RUNNER_SETS))
    if taken:
        raise ValueError(f"`overrides` may not hold {taken[0]!r}: the run sets it from "
                         f"{flags.RUNNER_SETS[taken[0]]}.")
    out = os.path.abspath(os.fspath(out))
    # The strategy first: a multi-worker one must exist before other TF work.
    strategy_object = distribute.strategy_for(strategy)
    workdir = _check_out(out, strategy_object)
    task = datasets.load(dataset, split=split, seed=seed)
    backup_dir = os.path.join(workdir, distribute.BACKUP)
    choice = None
    if choose:
        choice = _auto_choice(task, {"dataset": str(dataset), "split": split, "seed": seed,
                                     "budget_steps": budget_steps,
                                     "budget_minutes": budget_minutes,
                                     "data": run_fingerprint.data_digest(task),
                                     "candidates": [c.to_json() for c in auto.CANDIDATES]},
                              backup_dir, verbose)
        model_name, overrides, batch_size, epochs = (choice[k] for k in (
            "model", "options", "batch_size", "epochs"))
    spec = registry.get_spec(model_name)
    if task.task not in spec.tasks or task.kind not in spec.inputs:
        raise ValueError(f"Model {model_name!r} ({'/'.join(spec.tasks)} on "
                         f"{'/'.join(spec.inputs)} inputs) cannot train on {task.name!r} "
                         f"({task.task} on {task.kind} inputs).")
    epochs = default_epochs(task, batch_size) if epochs is None else epochs
    epochs = check.integer("epochs", epochs)
    config = {"model": model_name, "dataset": str(dataset), "split": split, "seed": seed,
              "epochs": epochs, "batch_size": batch_size, "num_samples": num_samples,
              "strategy": strategy, "overrides": outputs.jsonable(overrides or {}),
              "task": task.task, "input_shape": list(task.input_shape),
              "num_classes": task.num_classes, "description": task.description,
              "checkpoint_seconds": checkpoint_seconds}
    keras.utils.set_random_seed(seed)
    num_train = len(task.x_train)
    steps = epochs * steps_per_epoch(num_train, batch_size)
    if choice is not None:  # the learning rate decays as in the search run it chose
        config["auto"] = {"budget_steps": budget_steps, "budget_minutes": budget_minutes,
                          "decay_epochs": choice["decay_epochs"]}
        steps = choice["decay_epochs"] * steps_per_epoch(num_train, batch_size)
    with strategy_object.scope():
        model = registry.build_model(model_name, task.input_shape, task=task.task,
                                     num_classes=task.num_classes, num_train=num_train,
                                     seed=seed, decay_steps=steps, **(overrides or {}))
    # Only now, with everything checked, does anything go to disk; the lock
    # is held until the run ends.
    directory = run_dir.claim(workdir)
    chief = distribute.is_chief(strategy_object)
    try:
        staging = outputs.make_staging(directory)
        print(f"{model_name} on {task.description}; {epochs} epochs, batch {batch_size}, "
              f"seed {seed}, strategy {strategy} ({strategy_object.num_replicas_in_sync} "
              "replica(s))", flush=True)
        directory.add(distribute.BACKUP)
        if choice is not None:
            auto_choice.store_choice(backup_dir, choice)
        try:
            logs = _fit(model, task, dict(config, verbose=verbose), workdir, strategy_object)
        except TrainingDiverged as error:
            raise _keep_last_good(model, error, directory, staging, chief) from None
        train_seconds = time.perf_counter() - start
        result, prediction = _checked_score(model, task, num_samples, directory)
        result.update({"model": model_name, "dataset": task.name, "task": task.task,
                       "split": split, "seed": seed, "epochs": epochs,
                       "train_seconds": train_seconds, "threads": run_fingerprint.threads(),
                       "total_seconds": time.perf_counter() - start,
                       "versions": run_fingerprint.versions()})
        if choice is not None:
            result["selection"] = choice["selection"]
        outputs.write_all(model, task, config, logs, result, prediction, staging)
        if chief:
            outputs.publish(staging, directory)
    except BaseException:
        # Interrupted or failed: no staged files; the checkpoint (if any)
        # stays. Best effort: the directory may have just become unwritable.
        try:
            directory.remove(outputs.STAGING)
        except (OSError, ValueError):
            pass
        directory.release(discard_if_empty=True)
        raise
    directory.release()
    distribute.finish(out, workdir, strategy_object)
    return result


def _checked_score(model, task, num_samples, directory):
    """`score`, refusing non-finite metrics (and the checkpoint that would repeat them)."""
    try:
        with np.errstate(all="ignore"):  # overflow shows in the metrics, checked here
            result, prediction = score(model, task, num_samples)
        bad = [k for k, v in result.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError("the metrics are not finite (" + ", ".join(
                f"{k} {result[k]}" for k in bad) + ")")
    except (ValueError, ArithmeticError) as error:
        # Resuming would restore the same weights and fail the same way.
        directory.remove(distribute.BACKUP, owned=outputs.checkpoint_file)
        raise ValueError(f"Scoring the trained model on the test data of {task.name!r} "
                         f"overflowed: {error}. Check the data's scale (the predictions in its "
                         "units must stay finite). Removed the checkpoint; no results were "
                         "written.") from None
    return result, prediction


def evaluate(run_dir_path, num_samples=None, seed=0):
    """Reloads a finished run's model and data and scores it again.

    A run with preprocessing.json exported its model wrapped to take raw inputs
    (`zoo.run.outputs.in_data_units`): it is scored on the test inputs in the
    data's units. An older run's model.keras takes standardised inputs and is
    scored on those, as when it was trained.

    Returns:
        (stored results, fresh metrics). The fresh ones differ from the
        stored ones only by Monte Carlo noise (another seed of the T draws).

    Raises:
        ValueError: `run_dir_path` is not a finished run, or one of its
            files is missing, corrupted or holds values of the wrong type
            (the message names it).
    """
    run_dir_path = os.fspath(run_dir_path)
    num_samples = check.integer("num_samples", num_samples, allow_none=True)
    paths = {name: os.path.join(run_dir_path, name)
             for name in ("config.json", "results.json", "model.keras")}
    wrong = run_dir.missing_run_files(run_dir_path, list(paths))
    if wrong:
        raise ValueError(f"{wrong} (train one with `python -m zoo train MODEL --dataset D "
                         "--out DIR`).")
    config, stored = run_dir.read_run(paths["config.json"], paths["results.json"])
    raw_inputs = run_dir.read_preprocessing(os.path.join(run_dir_path, outputs.PREPROCESSING))
    model = tfp_bnn.saving.load_model(paths["model.keras"], safe_mode=True)
    task = datasets.load(config["dataset"], split=config["split"], seed=config["seed"])
    keras.utils.set_random_seed(seed)
    fresh, _ = score(model, task, num_samples or config["num_samples"],
                     raw_inputs=raw_inputs is not None)
    return stored, fresh

"""`python -m zoo train` and `evaluate`: train a ready model, score it, keep everything.

A run directory holds, when the run finished:

    config.json      what was run (model, dataset, split, seed, epochs, ...)
    results.json     test metrics in the data's units, timings, versions
    history.json     per-epoch training logs (loss, and data_loss / kl)
    training.png     the training curves
    predictions.png  regression: observed vs predicted, 95% intervals
    reliability.png  classification: the reliability diagram
    model.keras      the trained model (loads with safe_mode=True)
    saved_model/     SavedModel serving the Monte Carlo predictive

Everything is written into a staging directory first and moved in at the
end, `results.json` last, so a directory with results.json is complete and
an interrupted run leaves no half-written file among them. Checkpoints
(`.backup/`, written at every epoch end) let an interrupted run resume when
started again with the same arguments; it then finishes with the history,
weights and metrics of an uninterrupted run (the data order is a function
of seed and epoch, and the checkpoint holds the noise generators' state).
Arguments, data and model are all checked before anything is written.

If the loss turns non-finite, training stops in that batch and the run
directory keeps the last good state: `last_good.keras` (the model at the
end of the last finite epoch) and the checkpoint; no results are written.
"""

import json
import os
import platform
import shutil
import time

import keras
import numpy as np

import tfp_bnn
from tfp_bnn import metrics
from tfp_bnn.callbacks import DivergenceGuard
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.callbacks import TrainingDiverged
from tfp_bnn.data import shuffled_epochs
from tfp_bnn.data import steps_per_epoch
from tfp_bnn.modes import kl_layers
from zoo import datasets
from zoo import distribute
from zoo import registry
from zoo import run_plots

BATCH_SIZE = 32
NUM_SAMPLES = 100
CLASSIFICATION_EPOCHS = 30
# Regression runs aim at about this many optimizer steps (small tables get
# more epochs, large ones fewer), clipped to [MIN_EPOCHS, MAX_EPOCHS].
TARGET_STEPS = 6000
MIN_EPOCHS = 40
MAX_EPOCHS = 400
ARTIFACTS = ("config.json", "history.json", "training.png", "predictions.png",
             "reliability.png", "model.keras", "saved_model")
STAGING = ".staging"
LAST_GOOD = "last_good.keras"  # written when training diverges
# Minimum seconds between checkpoints: a save costs ~15 ms, a fifth of an
# epoch on the small tables; a killed run repeats at most this much.
CHECKPOINT_SECONDS = 2.0


def set_threads(threads, strict=True):
    """Runs TensorFlow ops on `threads` CPU threads (0: TensorFlow's default).

    With one thread a run is bit-for-bit reproducible on CPU: the same seed
    gives the same history, weights and metrics. With several, TensorFlow
    schedules ops and their shards over a thread pool, and sums can come out
    in another order: runs then differ in the last bits of float32, which
    training amplifies a little (measured on bbb_mlp/concrete, 20 epochs:
    two runs out of four differed, by ~1e-7 in the loss). The zoo's models
    are small, so one thread costs little (bbb_mlp 15 epochs 7 s with all
    threads against 10.6 s with one, flipout_lenet 25.6 s against 23.9 s;
    2 cores). Takes effect only before TensorFlow's first op.

    Args:
        threads: int >= 0.
        strict: if TensorFlow has started already with other settings,
            raise ValueError (True) or keep them and return False.

    Returns:
        True if TensorFlow now uses `threads` threads.
    """
    import tensorflow as tf  # noqa: PLC0415

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"`threads` must be an int >= 0, got {threads!r}.")
    config = tf.config.threading
    if (config.get_intra_op_parallelism_threads(),
            config.get_inter_op_parallelism_threads()) == (threads, threads):
        return True
    try:
        config.set_intra_op_parallelism_threads(threads)
        config.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        if not strict:
            return False
        raise ValueError(f"Cannot switch TensorFlow to {threads} thread(s): it has started "
                         "already. Call set_threads first (in a notebook: restart the "
                         "kernel).") from None
    return True


def _threads():
    import tensorflow as tf  # noqa: PLC0415

    config = tf.config.threading
    return {"intra_op": config.get_intra_op_parallelism_threads(),
            "inter_op": config.get_inter_op_parallelism_threads()}


def default_epochs(task: datasets.Task, batch_size: int = BATCH_SIZE) -> int:
    """Epochs when --epochs is not given: 30 for classification, ~6000 steps otherwise."""
    if task.task == "classification":
        return CLASSIFICATION_EPOCHS
    steps = steps_per_epoch(len(task.x_train), batch_size)
    return int(min(MAX_EPOCHS, max(MIN_EPOCHS, round(TARGET_STEPS / steps))))


def _check_out(out):
    """The run directory; refuses one that holds a finished run or foreign files."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} exists and is not a directory.")
    if os.path.isdir(out):
        if os.path.exists(os.path.join(out, "results.json")):
            raise ValueError(f"--out {out!r} already holds a finished run (results.json); "
                             "choose another directory or delete it.")
        foreign = sorted(set(os.listdir(out)) - {STAGING, distribute.BACKUP, distribute.WORKERS,
                                                 LAST_GOOD} - set(ARTIFACTS))
        if foreign:
            raise ValueError(f"--out {out!r} is not empty and not a zoo run directory "
                             f"(found {foreign[:3]}); choose an empty or new directory.")
    return out


def _write_json(path, payload):
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(payload, stream, indent=2, sort_keys=True, allow_nan=True)
        stream.write("\n")
    os.replace(temporary, path)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def sampling_free(model) -> bool:
    """Whether one deterministic pass gives `model`'s predictive distribution.

    True for a transformer regressor trained by moment propagation (its
    outputs are the propagated mean and variance); every other ready model
    needs Monte Carlo samples.
    """
    return getattr(model, "training_path", None) == "moments"


def score(model, task: datasets.Task, num_samples=NUM_SAMPLES, single_pass=False):
    """Test metrics of `model` on `task`, in the data's units.

    Returns:
        (metrics dict, prediction). Regression: rmse, log_likelihood (mean
        nats per point), coverage_95, mean_stddev. Classification:
        accuracy, nll, ece (15 bins), brier.
    """
    samples = 1 if single_pass else num_samples
    if task.task == "regression":
        prediction = tfp_bnn.predict.regression(model, task.x_test, num_samples=samples)
        prediction = prediction.rescale(shift=task.y_shift, scale=task.y_scale)
        y = task.y_test_original.reshape(-1, 1)
        result = {"rmse": float(prediction.rmse(y)),
                  "log_likelihood": float(np.mean(prediction.log_likelihood(y))),
                  "coverage_95": float(prediction.coverage(y, 0.95)),
                  "mean_stddev": float(np.mean(np.sqrt(prediction.total_variance)))}
    else:
        prediction = tfp_bnn.predict.classification(model, task.x_test, num_samples=samples)
        labels = task.y_test
        result = {"accuracy": metrics.accuracy(labels, prediction.probs),
                  "nll": metrics.negative_log_likelihood(labels, prediction.probs),
                  "ece": metrics.expected_calibration_error(labels, prediction.probs),
                  "brier": metrics.brier_score(labels, prediction.probs)}
    result["num_samples"] = samples
    result["num_test"] = int(len(task.x_test))
    return {k: float(v) if isinstance(v, np.floating) else v for k, v in result.items()}, \
        prediction


def _export(model, directory, task):
    """model.keras and the predictive SavedModel into `directory`."""
    model.save(os.path.join(directory, "model.keras"))
    signature = None
    if not getattr(model, "inputs", None):
        import tensorflow as tf  # noqa: PLC0415 - only subclassed models need it

        signature = [tf.TensorSpec((None,) + tuple(task.input_shape), "float32")]
    tfp_bnn.export.export_predictive(model, os.path.join(directory, "saved_model"),
                                     task=task.task, input_signature=signature)


def _fingerprint(config):
    """What a checkpoint must match to be resumed: everything that shapes training."""
    return {k: v for k, v in config.items()
            if k not in ("num_samples", "description", "checkpoint_seconds")}


def _make_staging(out, strategy_object):
    """Creates `out`, this worker's directory and its `.staging`; returns (workdir, staging).

    A directory that cannot be written is a ValueError that says so.
    """
    try:
        workdir = distribute.worker_directory(out, strategy_object)
        staging = os.path.join(workdir, STAGING)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        probe = os.path.join(staging, ".write-test")
        with open(probe, "w", encoding="utf-8") as stream:
            stream.write("ok")
        os.remove(probe)
    except OSError as error:
        raise ValueError(f"--out {out!r} cannot be written: {error.strerror or error} "
                         f"({error.filename or out}).") from None
    return workdir, staging


def _remove_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


def _fit(model, task, config, workdir, strategy_object):
    """Fits with checkpoints, the divergence guard and a resumable data order.

    Returns the logs of all epochs (those before a resume come from the
    checkpoint).
    """
    epochs, batch_size, seed = config["epochs"], config["batch_size"], config["seed"]
    num_train = len(task.x_train)
    backup = distribute.backup_callback(workdir, strategy_object,
                                        fingerprint=_fingerprint(config),
                                        delete_checkpoint=False,
                                        save_interval=config["checkpoint_seconds"])
    first = backup.restored_epoch()
    if first >= epochs:  # killed after training, before the results were written
        backup.restore(model)
        return backup.merged_history({})
    if first:
        print(f"resuming from the checkpoint after epoch {first}", flush=True)
    data = shuffled_epochs(task.x_train, task.y_train, batch_size, seed, epochs, first)
    if config["strategy"] == "multiworker":
        data = distribute.with_data_sharding(data)
    callbacks = [DivergenceGuard(), backup]  # the guard first: no NaN weights in a save
    if kl_layers(model):
        callbacks.insert(0, KLScheduler(num_examples=num_train))
    history = model.fit(data, epochs=epochs, initial_epoch=first,
                        steps_per_epoch=steps_per_epoch(num_train, batch_size),
                        shuffle=False, verbose=config["verbose"], callbacks=callbacks)
    return backup.merged_history(history.history)


def _keep_last_good(model, error, out, workdir, staging, chief):
    """After divergence: the last good model in out/last_good.keras; a message saying so."""
    kept = []
    if chief and error.last_good_epoch is not None:
        model.save(os.path.join(staging, LAST_GOOD))
        os.replace(os.path.join(staging, LAST_GOOD), os.path.join(out, LAST_GOOD))
        epochs = error.last_good_epoch
        kept.append(f"the model after {epochs} epoch{'' if epochs == 1 else 's'} in "
                    f"{os.path.join(out, LAST_GOOD)}")
    backup = os.path.join(workdir, distribute.BACKUP)
    if os.path.exists(backup):
        kept.append(f"the checkpoint in {backup}")
    shutil.rmtree(staging, ignore_errors=True)
    kept = " and ".join(kept) if kept else "no model"
    return TrainingDiverged(
        f"{error.summary} Kept {kept}; no results were written. Try a smaller learning rate "
        "(--set learning_rate=...) with a new --out.", error.epoch, error.batch, error.what,
        error.value, error.last_good_epoch, error.summary)


def train_and_evaluate(model_name, dataset, out, split=0, epochs=None, seed=0,
                       strategy="default", batch_size=BATCH_SIZE, num_samples=NUM_SAMPLES,
                       verbose=1, overrides=None, checkpoint_seconds=CHECKPOINT_SECONDS):
    """Trains `model_name` on `dataset`, scores it and writes the run directory.

    Every argument, the data and the model are checked before anything is
    written; a bad one raises ValueError and leaves nothing on disk. Training
    resumes from `out/.backup` when an earlier run with the same arguments
    was interrupted, and then ends with the same weights, history and
    metrics as an uninterrupted run. A non-finite loss raises
    `tfp_bnn.callbacks.TrainingDiverged` (a FloatingPointError) and keeps
    the last good model in `out/last_good.keras` and the checkpoint.

    Args:
        model_name: a name from `zoo.list_models()`.
        dataset: a built-in name or a path (see `zoo.datasets.load`).
        out: the run directory (new, empty, or an interrupted run's).
        split: split index; epochs: None for `default_epochs`; seed: int.
        strategy: "default", "mirrored" or "multiworker" (TF_CONFIG).
        batch_size: global batch size; num_samples: T at test time.
        verbose: Keras' fit verbosity (1: progress bar).
        overrides: dict of builder arguments (see `zoo.ready_models`).
        checkpoint_seconds: minimum seconds between checkpoints (0: at
            every epoch end); the last epoch is always saved.

    Returns:
        The results dict (also in out/results.json on the chief).
    """
    start = time.perf_counter()
    spec = registry.get_spec(model_name)
    for name, value in (("batch_size", batch_size), ("num_samples", num_samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    if (isinstance(checkpoint_seconds, bool) or not isinstance(checkpoint_seconds, (int, float))
            or not checkpoint_seconds >= 0 or checkpoint_seconds == float("inf")):
        raise ValueError(f"`checkpoint_seconds` must be a number >= 0, got "
                         f"{checkpoint_seconds!r}.")
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError(f"`overrides` must be a dict, got {type(overrides).__name__}.")
    out = _check_out(out)
    # The strategy first: a multi-worker one must exist before other TF work.
    strategy_object = distribute.strategy_for(strategy)
    task = datasets.load(dataset, split=split, seed=seed)
    if task.task not in spec.tasks or task.kind not in spec.inputs:
        raise ValueError(f"Model {model_name!r} ({'/'.join(spec.tasks)} on "
                         f"{'/'.join(spec.inputs)} inputs) cannot train on {task.name!r} "
                         f"({task.task} on {task.kind} inputs).")
    epochs = default_epochs(task, batch_size) if epochs is None else epochs
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs <= 0:
        raise ValueError(f"`epochs` must be a positive int, got {epochs!r}.")
    config = {"model": model_name, "dataset": str(dataset), "split": split, "seed": seed,
              "epochs": epochs, "batch_size": batch_size, "num_samples": num_samples,
              "strategy": strategy, "overrides": _jsonable(overrides or {}),
              "task": task.task, "input_shape": list(task.input_shape),
              "num_classes": task.num_classes, "description": task.description,
              "checkpoint_seconds": checkpoint_seconds}
    keras.utils.set_random_seed(seed)
    num_train = len(task.x_train)
    steps = epochs * steps_per_epoch(num_train, batch_size)
    with strategy_object.scope():
        model = registry.build_model(model_name, task.input_shape, task=task.task,
                                     num_classes=task.num_classes, num_train=num_train,
                                     seed=seed, decay_steps=steps, **(overrides or {}))
    # Only now, with everything checked, does anything go to disk.
    created = not os.path.exists(out)
    chief = distribute.is_chief(strategy_object)
    workdir, staging = _make_staging(out, strategy_object)
    print(f"{model_name} on {task.description}; {epochs} epochs, batch {batch_size}, "
          f"seed {seed}, strategy {strategy} ({strategy_object.num_replicas_in_sync} "
          "replica(s))", flush=True)
    try:
        logs = _fit(model, task, dict(config, verbose=verbose), workdir, strategy_object)
    except TrainingDiverged as error:
        raise _keep_last_good(model, error, out, workdir, staging, chief) from None
    except BaseException:
        # Interrupted or failed: no staged files; the checkpoint (if any) stays.
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            _remove_if_empty(workdir)
            _remove_if_empty(out)
        raise
    train_seconds = time.perf_counter() - start
    result, prediction = score(model, task, num_samples, sampling_free(model))
    result.update({"model": model_name, "dataset": task.name, "task": task.task,
                   "split": split, "seed": seed, "epochs": epochs,
                   "train_seconds": train_seconds, "threads": _threads(),
                   "total_seconds": time.perf_counter() - start,
                   "versions": {"tfp_bnn": tfp_bnn.__version__, "keras": keras.__version__,
                                "python": platform.python_version()}})
    _write_json(os.path.join(staging, "config.json"), config)
    _write_json(os.path.join(staging, "history.json"), _jsonable(logs))
    run_plots.training_curves(logs, os.path.join(staging, "training.png"), title=model_name)
    run_plots.task_plot(task, prediction, staging)
    _export(model, staging, task)
    _write_json(os.path.join(staging, "results.json"), _jsonable(result))
    if chief:
        _publish(staging, out)
    distribute.finish(out, workdir, strategy_object)
    return result


def _publish(staging, out):
    """Moves the staged artifacts into `out`, results.json last, and drops checkpoints."""
    for name in sorted(os.listdir(staging), key=lambda n: n == "results.json"):
        target = os.path.join(out, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(os.path.join(staging, name), target)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(os.path.join(out, distribute.BACKUP), ignore_errors=True)


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is corrupted: not valid JSON ({error}).") from None


def evaluate(run_dir, num_samples=None, seed=0):
    """Reloads a finished run's model and data and scores it again.

    Returns:
        (stored results, fresh metrics). The fresh ones differ from the
        stored ones only by Monte Carlo noise (another seed of the T draws).

    Raises:
        ValueError: `run_dir` is not a finished run, or one of its files is
            missing or corrupted (the message names it).
    """
    run_dir = os.fspath(run_dir)
    if num_samples is not None and (isinstance(num_samples, bool)
                                    or not isinstance(num_samples, int) or num_samples <= 0):
        raise ValueError(f"`num_samples` must be a positive int, got {num_samples!r}.")
    paths = {name: os.path.join(run_dir, name)
             for name in ("config.json", "results.json", "model.keras")}
    missing = [name for name, path in paths.items() if not os.path.exists(path)]
    if missing:
        raise ValueError(f"{run_dir!r} is not a finished zoo run: missing {missing} "
                         "(train one with `python -m zoo train MODEL --dataset D --out DIR`).")
    config = _read_json(paths["config.json"])
    stored = _read_json(paths["results.json"])
    absent = [key for key in ("dataset", "split", "seed", "num_samples") if key not in config]
    if not isinstance(config, dict) or absent:
        raise ValueError(f"{paths['config.json']} is not a zoo run configuration "
                         f"(missing {absent or 'everything'}).")
    model = tfp_bnn.saving.load_model(paths["model.keras"], safe_mode=True)
    task = datasets.load(config["dataset"], split=config["split"], seed=config["seed"])
    keras.utils.set_random_seed(seed)
    fresh, _ = score(model, task, num_samples or config["num_samples"], sampling_free(model))
    return stored, fresh

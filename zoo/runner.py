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
(`.backup/`) let an interrupted run resume where it stopped when started
again with the same arguments.
"""

import json
import math
import os
import platform
import shutil
import time

import keras
import numpy as np

import tfp_bnn
from tfp_bnn import metrics
from tfp_bnn.callbacks import KLScheduler
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


def default_epochs(task: datasets.Task, batch_size: int = BATCH_SIZE) -> int:
    """Epochs when --epochs is not given: 30 for classification, ~6000 steps otherwise."""
    if task.task == "classification":
        return CLASSIFICATION_EPOCHS
    steps_per_epoch = math.ceil(len(task.x_train) / batch_size)
    return int(min(MAX_EPOCHS, max(MIN_EPOCHS, round(TARGET_STEPS / steps_per_epoch))))


def _check_out(out):
    """The run directory; refuses one that holds a finished run or foreign files."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} exists and is not a directory.")
    if os.path.isdir(out):
        if os.path.exists(os.path.join(out, "results.json")):
            raise ValueError(f"--out {out!r} already holds a finished run (results.json); "
                             "choose another directory or delete it.")
        foreign = sorted(set(os.listdir(out)) - {STAGING, distribute.BACKUP, distribute.WORKERS}
                         - set(ARTIFACTS))
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


def _callbacks(model, num_train, out, strategy):
    callbacks = [distribute.backup_callback(out, strategy)]
    if kl_layers(model):
        callbacks.insert(0, KLScheduler(num_examples=num_train))
    return callbacks


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


def train_and_evaluate(model_name, dataset, out, split=0, epochs=None, seed=0,
                       strategy="default", batch_size=BATCH_SIZE, num_samples=NUM_SAMPLES,
                       verbose=1, overrides=None):
    """Trains `model_name` on `dataset`, scores it and writes the run directory.

    Args:
        model_name: a name from `zoo.list_models()`.
        dataset: a built-in name or a path (see `zoo.datasets.load`).
        out: the run directory (new, empty, or an interrupted run's).
        split: split index; epochs: None for `default_epochs`; seed: int.
        strategy: "default", "mirrored" or "multiworker" (TF_CONFIG).
        batch_size: global batch size; num_samples: T at test time.
        verbose: Keras' fit verbosity (1: progress bar).
        overrides: dict of builder arguments (see `zoo.ready_models`).

    Returns:
        The results dict (also in out/results.json on the chief).
    """
    start = time.perf_counter()
    spec = registry.get_spec(model_name)
    for name, value in (("batch_size", batch_size), ("num_samples", num_samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
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
    chief = distribute.is_chief(strategy_object)
    workdir = distribute.worker_directory(out, strategy_object)
    staging = os.path.join(workdir, STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    config = {"model": model_name, "dataset": str(dataset), "split": split, "seed": seed,
              "epochs": epochs, "batch_size": batch_size, "num_samples": num_samples,
              "strategy": strategy, "overrides": _jsonable(overrides or {}),
              "task": task.task, "input_shape": list(task.input_shape),
              "num_classes": task.num_classes, "description": task.description}
    print(f"{model_name} on {task.description}; {epochs} epochs, batch {batch_size}, "
          f"seed {seed}, strategy {strategy} ({strategy_object.num_replicas_in_sync} "
          "replica(s))", flush=True)
    keras.utils.set_random_seed(seed)
    num_train = len(task.x_train)
    steps = epochs * math.ceil(num_train / batch_size)
    with strategy_object.scope():
        model = registry.build_model(model_name, task.input_shape, task=task.task,
                                     num_classes=task.num_classes, num_train=num_train,
                                     seed=seed, decay_steps=steps, **(overrides or {}))
    history = model.fit(task.x_train, task.y_train, epochs=epochs, batch_size=batch_size,
                        verbose=verbose, shuffle=True,
                        callbacks=_callbacks(model, num_train, workdir, strategy_object))
    train_seconds = time.perf_counter() - start
    logs = _jsonable(history.history)
    bad = [key for key, values in logs.items() if values and not math.isfinite(values[-1])]
    if bad:
        raise FloatingPointError(f"Training diverged: the last {bad[0]} is {logs[bad[0]][-1]}; "
                                 "try a smaller --learning-rate or fewer epochs. Nothing "
                                 f"was written to {out}.")
    result, prediction = score(model, task, num_samples, sampling_free(model))
    result.update({"model": model_name, "dataset": task.name, "task": task.task,
                   "split": split, "seed": seed, "epochs": epochs,
                   "train_seconds": train_seconds,
                   "total_seconds": time.perf_counter() - start,
                   "versions": {"tfp_bnn": tfp_bnn.__version__, "keras": keras.__version__,
                                "python": platform.python_version()}})
    _write_json(os.path.join(staging, "config.json"), config)
    _write_json(os.path.join(staging, "history.json"), logs)
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


def evaluate(run_dir, num_samples=None, seed=0):
    """Reloads a finished run's model and data and scores it again.

    Returns:
        (stored results, fresh metrics). The fresh ones differ from the
        stored ones only by Monte Carlo noise (another seed of the T draws).
    """
    run_dir = os.fspath(run_dir)
    paths = {name: os.path.join(run_dir, name)
             for name in ("config.json", "results.json", "model.keras")}
    missing = [name for name, path in paths.items() if not os.path.exists(path)]
    if missing:
        raise ValueError(f"{run_dir!r} is not a finished zoo run: missing {missing} "
                         "(train one with `python -m zoo train MODEL --dataset D --out DIR`).")
    with open(paths["config.json"], encoding="utf-8") as stream:
        config = json.load(stream)
    with open(paths["results.json"], encoding="utf-8") as stream:
        stored = json.load(stream)
    model = keras.saving.load_model(paths["model.keras"], safe_mode=True)
    task = datasets.load(config["dataset"], split=config["split"], seed=config["seed"])
    keras.utils.set_random_seed(seed)
    fresh, _ = score(model, task, num_samples or config["num_samples"], sampling_free(model))
    return stored, fresh

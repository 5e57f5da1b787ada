"""What a finished zoo run writes, and how: staged first, moved in with results.json last.

`zoo.run.runner` trains and scores; this module writes config.json,
history.json, the plots, preprocessing.json (the scaling statistics),
model.keras and the predictive SavedModel (both of the model wrapped by
`tfp_bnn.export.with_preprocessing`: raw inputs in, the target's units out)
and results.json into the run directory's `.staging`, then moves them into the
run directory (`publish`), results.json last, so a directory holding
results.json is complete.
"""

import json
import os

import numpy as np

import tfp_bnn
from tfp_bnn.callbacks.atomic_backup_and_restore import is_checkpoint_file
from zoo.run import auto_choice
from zoo.run import distribute
from zoo.run import plots as run_plots

STAGING = ".staging"
PREPROCESSING = "preprocessing.json"


def write_json(path, payload):
    temporary = f"{path}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as stream:
            json.dump(payload, stream, indent=2, sort_keys=True, allow_nan=True)
            stream.write("\n")
    except OSError as error:
        if error.filename:
            raise
        raise OSError(error.errno, error.strerror, path) from None  # write() names no file
    os.replace(temporary, path)


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def preprocessing(task):
    """The scaling statistics of `task` (what preprocessing.json holds): the model
    standardises raw inputs with x_mean / x_std and, for regression, answers in the
    target's units through y_mean / y_std (None for classification)."""
    width = task.input_shape[-1]
    regression = task.task == "regression"
    return {"task": task.task,
            "x_mean": np.broadcast_to(np.asarray(task.x_shift, np.float64), (width,)).tolist(),
            "x_std": np.broadcast_to(np.asarray(task.x_scale, np.float64), (width,)).tolist(),
            "y_mean": float(task.y_shift) if regression else None,
            "y_std": float(task.y_scale) if regression else None,
            "output": "mean_log_variance" if regression else None}


def in_data_units(model, statistics, input_shape):
    """`model` wrapped to take raw inputs (and answer in the target's units), as exported."""
    return tfp_bnn.export.with_preprocessing(
        model, x_mean=statistics["x_mean"], x_std=statistics["x_std"],
        y_mean=statistics["y_mean"], y_std=statistics["y_std"],
        output=statistics["output"] or "mean", input_shape=tuple(input_shape))


def _export(model, directory, task):
    """preprocessing.json, then model.keras and the predictive SavedModel of the model
    wrapped to take raw inputs and answer in the data's units, into `directory`."""
    statistics = preprocessing(task)
    write_json(os.path.join(directory, PREPROCESSING), statistics)
    wrapped = in_data_units(model, statistics, task.input_shape)
    wrapped.save(os.path.join(directory, "model.keras"))
    tfp_bnn.export.export_predictive(wrapped, os.path.join(directory, "saved_model"),
                                     task=task.task)


def make_staging(directory):
    """Creates the claimed run directory's `.staging` (empty); returns its path.

    A directory that cannot be written is a ValueError that says so.
    """
    out = directory.path
    try:
        staging = os.path.join(out, STAGING)
        directory.remove(STAGING)
        directory.add(STAGING)
        os.makedirs(staging)
        probe = os.path.join(staging, ".write-test")
        with open(probe, "w", encoding="utf-8") as stream:
            stream.write("ok")
        os.remove(probe)
    except OSError as error:
        raise ValueError(f"--out {out!r} cannot be written: {error.strerror or error} "
                         f"({error.filename or out}).") from None
    return staging


def write_all(model, task, config, logs, result, prediction, staging):
    """Every artifact into `staging`, results.json last; a failed write is an OSError."""
    import tensorflow as tf  # noqa: PLC0415

    try:
        write_json(os.path.join(staging, "config.json"), config)
        write_json(os.path.join(staging, "history.json"), jsonable(logs))
        run_plots.training_curves(logs, os.path.join(staging, "training.png"),
                                  title=config["model"], task=task.task)
        run_plots.task_plot(task, prediction, staging)
        _export(model, staging, task)
        write_json(os.path.join(staging, "results.json"), jsonable(result))
    except tf.errors.OpError as error:  # TensorFlow's own file writes (the SavedModel)
        raise OSError(f"Cannot write the run's files into {staging}: "
                      f"{' '.join(error.message.split())[:300]}; the checkpoint is kept, rerun "
                      "to try again.") from None


def publish(staging, directory):
    """Moves the staged artifacts into the run directory, results.json last, and drops
    the checkpoint. Only names the zoo's marker lists are ever replaced."""
    for name in sorted(os.listdir(staging), key=lambda n: n == "results.json"):
        directory.move_in(os.path.join(staging, name), name)
    directory.remove(STAGING)
    directory.remove(distribute.BACKUP, owned=checkpoint_file)


def checkpoint_file(name):
    """Whether the zoo wrote `name` in a run's checkpoint directory (the callback's files
    and the choice of model 'auto'); only these are deleted with the checkpoint."""
    return is_checkpoint_file(name) or name in auto_choice.CHECKPOINT_FILES

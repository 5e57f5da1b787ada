"""The plots of a zoo run: training curves and the test-set picture, in the data's units.

Each function draws on a given Axes (`ax=`) or a new off-screen Figure and
returns the Figure; with `path=` it also writes the PNG atomically
(`tfp_bnn.plots.save`).
"""

import os

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn import plots
from tfp_bnn.plots import figure_axes
from tfp_bnn.plots import png_path
from tfp_bnn.plots import save
from zoo.models.limits import printable

# Logged by fit and KLScheduler: the objective and its two parts.
CURVES = ("loss", "data_loss", "kl")
# What the logged loss is: the mean NLL per example plus KL / N, in nats; a
# regression model is fitted to standardised targets (datasets.Task).
LOSS_LABELS = {
    "regression": "loss per example (nats, standardised targets)",
    "classification": "loss per example (nats)",
}
LEVEL_Z = 1.96  # the central 95% interval of a Gaussian


def _finish(figure, path):
    return figure if path is None else save(figure, path)


def training_curves(history: dict, path=None, title=None, *, task="regression", ax=None):
    """Per-epoch loss (and its data / KL parts when logged) against epoch.

    Args:
        history: `History.history`-like dict of per-epoch lists.
        path: optional .png to write.
        title: optional title.
        task: "regression" or "classification": what the loss is measured on.
        ax: optional Axes to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    ylabel = LOSS_LABELS[check.one_of("task", task, tuple(LOSS_LABELS))]
    curves = {key: np.asarray(history[key], np.float64) for key in CURVES
              if key in history and len(history[key])}
    if "loss" not in curves:
        raise ValueError(f"`history` has no 'loss' values, keys: {sorted(history)}.")

    figure, ax = figure_axes(ax)
    for key, values in curves.items():
        ax.plot(np.arange(1, len(values) + 1), values, label=key)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.set_title(printable(title or "training"))  # a font takes no lone surrogates
    return _finish(figure, path)


def predictions_vs_observed(y, mean, stddev, path=None, level_z=LEVEL_Z, title=None, *,
                            label="target", ax=None):
    """Predicted mean with +-`level_z` sd bars against the observed target.

    Points on the diagonal are exact; bars that cross it are intervals that
    cover the target. `y`, `mean` and `stddev` are drawn as given, so pass
    them in one set of units (`task_plot` passes the data's).

    Args:
        y: observed targets, length n.
        mean, stddev: the predictive mean and standard deviation, length n.
        path: optional .png to write.
        level_z: half-width of the bars in standard deviations (1.96: 95%).
        title: optional title.
        label: what the target is, with its units, for the axis labels.
        ax: optional Axes to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.
    """
    path = png_path(path, allow_none=True)
    check.axes("ax", ax)
    y = np.ravel(np.asarray(y, np.float64))
    mean = np.ravel(np.asarray(mean, np.float64))
    stddev = np.ravel(np.asarray(stddev, np.float64))
    if not len(y) == len(mean) == len(stddev):
        raise ValueError(f"Mismatched lengths: y {len(y)}, mean {len(mean)}, "
                         f"stddev {len(stddev)}.")
    label = printable(label)

    figure, ax = figure_axes(ax)
    ax.errorbar(y, mean, yerr=level_z * stddev, fmt="o", markersize=3, alpha=0.6,
                elinewidth=0.8, label="predictive mean, 95% interval")
    low, high = float(min(y.min(), mean.min())), float(max(y.max(), mean.max()))
    ax.plot([low, high], [low, high], color="black", linewidth=1, label="y = x")
    ax.set_xlabel(f"observed {label}")
    ax.set_ylabel(f"predicted {label}")
    ax.legend()
    ax.set_title(printable(title or "test set"))
    return _finish(figure, path)


def task_plot(task, prediction, directory=None, *, ax=None):
    """predictions.png (regression) or reliability.png (classification) in `directory`.

    A regression model predicts standardised targets; its mean and standard
    deviation are mapped to the data's units with the task's statistics
    (y_scale * mean + y_shift, y_scale * stddev), the same map the run's RMSE
    is computed with, and drawn against the observed targets in those units.

    Args:
        task: the run's `zoo.run.datasets.Task`.
        prediction: the run's prediction on the test set (standardised targets).
        directory: where to write the PNG; None writes nothing.
        ax: optional Axes to draw on; None draws on a new Figure.

    Returns:
        The `matplotlib.figure.Figure` drawn on.
    """
    if task.task == "regression":
        path = None if directory is None else os.path.join(directory, "predictions.png")
        mean = task.y_scale * np.asarray(prediction.mean, np.float64) + task.y_shift
        stddev = task.y_scale * np.asarray(prediction.stddev, np.float64)
        return predictions_vs_observed(task.y_test_original, mean, stddev, path,
                                       title=f"{task.name}: test predictions",
                                       label=task.target_label, ax=ax)
    path = None if directory is None else os.path.join(directory, "reliability.png")
    return plots.reliability_diagram(task.y_test, prediction.probs, path,
                                     title=printable(f"{task.name}: reliability"), ax=ax)

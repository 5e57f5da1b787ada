"""The PNG plots of a zoo run: training curves and the test-set picture."""

import os

import numpy as np

from tfp_bnn import plots
from tfp_bnn.plots import png_path
from tfp_bnn.plots import save_figure
from zoo.models.limits import printable

# Logged by fit and KLScheduler: the objective and its two parts.
CURVES = ("loss", "data_loss", "kl")


def training_curves(history: dict, path, title=None) -> str:
    """Per-epoch loss (and its data / KL parts when logged) against epoch.

    Args:
        history: `History.history`-like dict of per-epoch lists.
        path: the .png to write.
        title: optional title.

    Returns:
        `path`.
    """
    path = png_path(path)
    curves = {key: np.asarray(history[key], np.float64) for key in CURVES
              if key in history and len(history[key])}
    if "loss" not in curves:
        raise ValueError(f"`history` has no 'loss' values, keys: {sorted(history)}.")

    def draw(figure):
        axes = figure.subplots()
        for key, values in curves.items():
            axes.plot(np.arange(1, len(values) + 1), values, label=key)
        axes.set_xlabel("epoch")
        axes.set_ylabel("per-example objective (nats)")
        axes.legend()
        axes.set_title(printable(title or "training"))  # a font takes no lone surrogates
    return save_figure(draw, path)


def predictions_vs_observed(y, mean, stddev, path, level_z=1.96, title=None) -> str:
    """Predicted mean with +-1.96 sd bars against the observed target.

    Points on the diagonal are exact; bars that cross it are intervals that
    cover the target.
    """
    path = png_path(path)
    y = np.ravel(np.asarray(y, np.float64))
    mean = np.ravel(np.asarray(mean, np.float64))
    stddev = np.ravel(np.asarray(stddev, np.float64))
    if not len(y) == len(mean) == len(stddev):
        raise ValueError(f"Mismatched lengths: y {len(y)}, mean {len(mean)}, "
                         f"stddev {len(stddev)}.")

    def draw(figure):
        axes = figure.subplots()
        axes.errorbar(y, mean, yerr=level_z * stddev, fmt="o", markersize=3, alpha=0.6,
                      elinewidth=0.8, label="predictive mean, 95% interval")
        low, high = float(min(y.min(), mean.min())), float(max(y.max(), mean.max()))
        axes.plot([low, high], [low, high], color="black", linewidth=1, label="y = x")
        axes.set_xlabel("observed")
        axes.set_ylabel("predicted")
        axes.legend()
        axes.set_title(printable(title or "test set"))
    return save_figure(draw, path)


def task_plot(task, prediction, directory) -> str:
    """predictions.png (regression) or reliability.png (classification) in `directory`."""
    if task.task == "regression":
        return predictions_vs_observed(task.y_test_original, prediction.mean, prediction.stddev,
                                       os.path.join(directory, "predictions.png"),
                                       title=f"{task.name}: test predictions")
    return plots.reliability_diagram(task.y_test, prediction.probs,
                                     os.path.join(directory, "reliability.png"),
                                     title=printable(f"{task.name}: reliability"))

"""Tests of zoo.run.plots: the run's figures draw the data's units, read back from the Axes."""

import os
import types

import numpy as np
import pytest

from tfp_bnn.predict import RegressionPrediction
from zoo.models import registry
from zoo.run import datasets
from zoo.run import plots
from zoo.run import runner
from zoo.run import scoring

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SHIFT, SCALE = 35.8, 16.7  # about the concrete strengths' mean and s.d., MPa


def _fake_regression(n=40, samples=30, seed=0):
    """A task in standardised units and a prediction of it with known mean and spread."""
    rng = np.random.default_rng(seed)
    y_std = rng.normal(size=(n, 1))
    task = datasets.Task(name="fake", task="regression", x_train=np.zeros((n, 2), "float32"),
                         y_train=y_std, x_test=np.zeros((n, 2), "float32"), y_test=y_std,
                         input_shape=(2,), y_shift=SHIFT, y_scale=SCALE,
                         target_label="compressive strength (MPa)")
    sample_means = y_std[None] + 0.3 * rng.normal(size=(samples, n, 1))
    sample_variances = np.full((samples, n, 1), 0.2 ** 2)
    return task, RegressionPrediction(sample_means, sample_variances)


def _errorbars(ax):
    """(observed, plotted mean, lower, upper) of the one errorbar series on `ax`."""
    (container,) = ax.containers
    data_line, _, (bars,) = container.lines
    points = data_line.get_xydata()
    segments = np.array(bars.get_segments())  # one [[x, low], [x, high]] per point
    np.testing.assert_array_equal(segments[:, 0, 0], points[:, 0])
    return points[:, 0], points[:, 1], segments[:, 0, 1], segments[:, 1, 1]


def test_the_predictive_mean_and_bars_are_drawn_in_the_data_units():
    task, prediction = _fake_regression()
    figure = plots.task_plot(task, prediction)
    (ax,) = figure.axes
    observed, mean, lower, upper = _errorbars(ax)
    # Computed here from the samples, not with the code under test.
    expected_mean = SCALE * prediction.sample_means.mean(axis=0)[:, 0] + SHIFT
    total_sd = np.sqrt(prediction.sample_means.var(axis=0) + prediction.sample_variances.mean(0))
    half_width = 1.96 * SCALE * total_sd[:, 0]
    np.testing.assert_allclose(observed, SCALE * task.y_test[:, 0] + SHIFT, rtol=1e-12)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-12)
    np.testing.assert_allclose(upper - mean, half_width, rtol=1e-9)
    np.testing.assert_allclose(mean - lower, half_width, rtol=1e-9)
    # The points are those the run's RMSE is computed from.
    rmse = scoring.regression_scores(prediction, observed[:, None], SHIFT, SCALE)["rmse"]
    assert np.sqrt(np.mean((mean - observed) ** 2)) == pytest.approx(rmse, rel=1e-12)
    (diagonal,) = ax.lines[1:]  # lines[0] is the errorbar's own data line
    low, high = min(observed.min(), mean.min()), max(observed.max(), mean.max())
    np.testing.assert_allclose(diagonal.get_xydata(), [[low, low], [high, high]])
    assert ax.get_xlabel() == "observed compressive strength (MPa)"
    assert ax.get_ylabel() == "predicted compressive strength (MPa)"


def test_an_unnamed_target_is_labelled_target():
    task, prediction = _fake_regression(n=5)
    task.target_label = datasets.Task.target_label  # the default, as for a user directory
    ax = plots.task_plot(task, prediction).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("observed target", "predicted target")


@pytest.fixture(scope="module")
def short_concrete_run():
    """flipout_mlp fitted for a few epochs on concrete, as a run trains it, and its test scores."""
    task = datasets.load("concrete", split=0, seed=0)
    model = registry.build_model("flipout_mlp", task.input_shape, num_train=len(task.x_train),
                                 seed=0, hidden_units=(32,))
    history, _ = scoring.fit(model, task.x_train, task.y_train, epochs=8, batch_size=32, seed=0,
                             seeded_batches=True)
    result, prediction = runner.score(model, task, num_samples=20)
    return task, history.history, result, prediction


def test_a_real_run_plots_strengths_in_mpa_matching_its_rmse(short_concrete_run, tmp_path):
    task, _, result, prediction = short_concrete_run
    figure = plots.task_plot(task, prediction, tmp_path)
    assert (tmp_path / "predictions.png").read_bytes()[:8] == PNG_SIGNATURE
    observed, mean, lower, upper = _errorbars(figure.axes[0])
    np.testing.assert_allclose(observed, np.ravel(task.y_test_original))
    # A model that has learnt something predicts strengths inside the range of the
    # ones it was trained on (2.3-82.6 MPa), not standardised values around 0.
    train = task.y_train * task.y_scale + task.y_shift
    assert train.min() <= mean.min() and mean.max() <= train.max()
    assert np.std(mean) > 0.5 * np.std(observed)
    assert np.sqrt(np.mean((mean - observed) ** 2)) == pytest.approx(result["rmse"], rel=1e-9)
    # 95% bars in MPa: their mean half-width is 1.96 times the run's mean_stddev.
    assert np.mean(upper - mean) == pytest.approx(1.96 * result["mean_stddev"], rel=1e-9)


def test_the_training_curve_draws_the_logged_losses_and_says_what_they_are(short_concrete_run):
    _, history, _, _ = short_concrete_run
    ax = plots.training_curves(history, title="flipout_mlp").axes[0]
    drawn = {line.get_label(): line.get_xydata() for line in ax.lines}
    assert set(drawn) == {"loss", "data_loss", "kl"}
    for key, points in drawn.items():
        np.testing.assert_array_equal(points[:, 0], np.arange(1, 9))
        np.testing.assert_allclose(points[:, 1], history[key])
    # loss = data_loss + kl: the curves are the objective and its two parts.
    np.testing.assert_allclose(drawn["loss"][:, 1], drawn["data_loss"][:, 1] + drawn["kl"][:, 1],
                               rtol=1e-5)
    assert ax.get_ylabel() == "loss per example (nats, standardised targets)"
    assert ax.get_xlabel() == "epoch" and ax.get_title() == "flipout_mlp"


def test_a_classification_curve_has_no_standardised_targets():
    ax = plots.training_curves({"loss": [2.3, 1.1]}, task="classification").axes[0]
    assert ax.get_ylabel() == "loss per example (nats)"
    with pytest.raises(ValueError, match=r"`task` must be one of \['regression', "
                                         r"'classification'\], got 'ranking'"):
        plots.training_curves({"loss": [1.0]}, task="ranking")


def test_a_classification_task_draws_its_reliability_diagram(tmp_path):
    labels = np.array([0, 1, 1, 2, 2, 2])
    probs = np.eye(3)[labels] * 0.7 + 0.1
    task = datasets.Task(name="digits", task="classification", x_train=None, y_train=None,
                         x_test=None, y_test=labels, input_shape=(8, 8, 1), num_classes=3)
    figure = plots.task_plot(task, types.SimpleNamespace(probs=probs), tmp_path)
    (ax,) = figure.axes
    assert ax.get_title() == "digits: reliability" and ax.get_xlabel() == "confidence"
    assert os.listdir(tmp_path) == ["reliability.png"]


def test_ax_draws_on_the_given_axes_and_writes_nothing_without_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    figure = Figure(figsize=(8, 3))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    task, prediction = _fake_regression(n=6)
    assert plots.training_curves({"loss": [1.0, 0.5]}, ax=left) is figure
    assert plots.task_plot(task, prediction, ax=right) is figure
    assert figure.axes == [left, right]
    np.testing.assert_array_equal(left.lines[0].get_ydata(), [1.0, 0.5])
    assert len(right.containers) == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("call", ["curves", "task", "predictions"])
def test_a_bad_ax_is_one_value_error(call, tmp_path):
    task, prediction = _fake_regression(n=4)
    bad = Figure()
    with pytest.raises(ValueError, match=r"^`ax` must be a matplotlib Axes .*got Figure\.$"):
        if call == "curves":
            plots.training_curves({"loss": [1.0]}, tmp_path / "t.png", ax=bad)
        elif call == "task":
            plots.task_plot(task, prediction, tmp_path, ax=bad)
        else:
            plots.predictions_vs_observed([1.0], [1.0], [0.1], tmp_path / "p.png", ax=bad)
    assert os.listdir(tmp_path) == []

"""Tests of zoo.experiments.transformer_compare: the data, short runs, seeds and the CLI."""

import json

import numpy as np
import pytest

from tfp_bnn.data import load_concrete
from tfp_bnn.data import load_sunspots
from zoo.experiments import transformer_compare


def test_sunspots_task_holds_out_the_last_months():
    data, shift, scale = transformer_compare.sunspots_data()
    _, values = load_sunspots()
    assert data["x_train"].shape[1:] == (transformer_compare.WINDOW, 1)
    assert len(data["y_test"]) == transformer_compare.TEST_MONTHS
    np.testing.assert_allclose(data["y_test"] * scale + shift,
                               values[-transformer_compare.TEST_MONTHS:], rtol=1e-4, atol=1e-3)


def test_concrete_task_standardises_with_training_statistics():
    data, shift, scale = transformer_compare.concrete_data(seed=0)
    _, y = load_concrete()
    assert len(data["y_train"]) + len(data["y_test"]) == len(y)
    assert abs(float(np.mean(data["y_train"]))) < 1e-5
    assert float(np.std(data["y_train"])) == pytest.approx(1.0, rel=1e-4)
    assert float(np.std(data["y_test"] * scale + shift)) > 1.0  # back in MPa


@pytest.fixture(scope="module")
def short_run():
    """`run("sunspots")` for 1 epoch, T = 3, on the first 96 training windows and 24 test
    targets: both transformer paths and the LSTM train, predict and are scored."""
    data, shift, scale = transformer_compare.sunspots_data()
    small = {"x_train": data["x_train"][:96], "y_train": data["y_train"][:96],
             "x_test": data["x_test"][:24], "y_test": data["y_test"][:24]}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformer_compare, "sunspots_data", lambda: (small, shift, scale))
        return transformer_compare.run("sunspots", epochs=1, num_samples=3)


def test_short_run_reports_every_row(short_run):
    # One epoch on a few windows: what is checked is that every row trains, predicts
    # and is scored (the Monte Carlo transformer's prediction is tested here only).
    assert [(row["model"], row["path"], row["mode"]) for row in short_run["rows"]] == [
        ("transformer", "mc", "diagonal"), ("transformer", "moments", "diagonal"),
        ("lstm", "mc", "diagonal")]
    for row in short_run["rows"]:
        assert {"log_likelihood", "rmse", "coverage_95", "mean_stddev"} <= set(row), row
        assert np.isfinite(row["log_likelihood"]) and row["rmse"] > 0
        assert 0.0 <= row["coverage_95"] <= 1.0
    for name in ("transformer, Monte Carlo (Flipout)", "transformer, moments (diagonal)",
                 "LSTM, Monte Carlo (reparameterization)"):
        assert f"| {name} |" in short_run["markdown"]
    assert "(96 training windows); 1 epochs, seed 0" in short_run["markdown"]
    assert (short_run["task"], short_run["epochs"], short_run["seed"]) == ("sunspots", 1, 0)


def test_concrete_run_has_no_lstm_row():
    # No path trains (paths=()): the concrete branch of `run` and its description only.
    result = transformer_compare.run("concrete", epochs=1, paths=())
    assert result["rows"] == []
    assert "UCI concrete, 8 feature tokens, 90/10 split seed 0 (927 train / 103 test)" in (
        result["markdown"])
    with pytest.raises(ValueError, match="lstm"):
        transformer_compare.run("concrete", lstm=True)


def _seeded(result, seed):
    """A copy of a `run` result as if run with `seed`: every metric + seed / 10."""
    rows = [{**row, **{metric: row[metric] + seed / 10 for metric in transformer_compare.METRICS}}
            for row in result["rows"]]
    return {**result, "seed": seed, "rows": rows}


def _fake_run(seed, values):
    """A `run` result with two rows whose metrics are taken from `values`."""
    rows = []
    for model, path, offset in (("transformer", "mc", 0.0), ("lstm", "mc", 10.0)):
        rows.append({"model": model, "path": path, "mode": "diagonal",
                     **{metric: value + offset for metric, value in
                        zip(transformer_compare.METRICS, values)}})
    return {"seed": seed, "rows": rows}


def test_summarize_seeds_matches_mean_and_standard_error_by_hand():
    values = np.array([[-4.3, 18.0, 0.95, 20.0, 2.0],
                       [-4.1, 17.5, 0.97, 22.0, 2.5],
                       [-4.6, 19.1, 0.93, 21.0, 1.5]])
    runs = [_fake_run(seed, row) for seed, row in zip((4, 5, 6), values)]
    summary = transformer_compare.summarize_seeds(runs)
    assert [(entry["model"], entry["seeds"]) for entry in summary] == [
        ("transformer", [4, 5, 6]), ("lstm", [4, 5, 6])]
    for entry, offset in zip(summary, (0.0, 10.0)):
        for column, metric in enumerate(transformer_compare.METRICS):
            column_values = values[:, column] + offset
            mean = column_values.sum() / 3
            # Standard error: the sample s.d. (divisor n - 1) over sqrt(n).
            se = np.sqrt(((column_values - mean) ** 2).sum() / 2) / np.sqrt(3)
            assert entry[metric] == pytest.approx(mean, rel=1e-12), metric
            assert entry[f"{metric}_se"] == pytest.approx(se, rel=1e-12), metric


def test_summarize_and_run_seeds_refuse_what_they_cannot_average():
    with pytest.raises(ValueError, match="runs"):
        transformer_compare.summarize_seeds([_fake_run(0, range(5))])
    other = _fake_run(1, range(5))
    other["rows"] = other["rows"][:1]
    with pytest.raises(ValueError, match="same rows"):
        transformer_compare.summarize_seeds([_fake_run(0, range(5)), other])
    for seeds in ([0], [2, 2]):
        with pytest.raises(ValueError, match="seeds"):
            transformer_compare.run_seeds("concrete", seeds)


def test_repeats_flag_runs_consecutive_seeds_into_json(short_run, monkeypatch, tmp_path,
                                                       capsys):
    # The command's wiring with `run` replaced by copies of the short run (nothing
    # trains): --seed 3 --repeats 3 runs seeds 3, 4, 5 through run_seeds, averages
    # each row and writes every seed's rows as JSON.
    calls = []

    def fake_run(task, epochs, seed, num_samples, paths, lstm=None):
        calls.append((task, epochs, seed, num_samples, paths))
        return _seeded(short_run, seed)

    monkeypatch.setattr(transformer_compare, "run", fake_run)
    out = tmp_path / "compare.json"
    assert transformer_compare.main(["--seed", "3", "--repeats", "3", "--epochs", "2",
                                     "--samples", "7", "--out", str(out)]) == 0
    paths = transformer_compare.PATHS
    assert calls == [("sunspots", 2, seed, 7, paths) for seed in (3, 4, 5)]
    written = json.loads(out.read_text())
    assert [run["seed"] for run in written["runs"]] == [3, 4, 5]
    printed = capsys.readouterr().out
    assert "over seeds 3, 4, 5" in printed
    for row, entry in zip(short_run["rows"], written["summary"]):
        assert (entry["model"], entry["path"], entry["seeds"]) == (
            row["model"], row["path"], [3, 4, 5])
        # Metrics + 0.3, 0.4, 0.5: mean + 0.4, s.e. 0.1 / sqrt(3).
        assert entry["log_likelihood"] == pytest.approx(row["log_likelihood"] + 0.4)
        assert entry["log_likelihood_se"] == pytest.approx(0.1 / np.sqrt(3))
        ll = f"{row['log_likelihood'] + 0.4:.3f} ± {0.1 / np.sqrt(3):.3f}"
        assert f"| {transformer_compare.row_name(row)} | {ll} |" in printed


def test_bad_task_and_flags(capsys):
    with pytest.raises(ValueError, match="task"):
        transformer_compare.run("mnist")
    with pytest.raises(SystemExit):
        transformer_compare.main(["--samples", "0"])
    assert "--samples must be a positive int" in capsys.readouterr().err
    for repeats in ("0", "101"):
        with pytest.raises(SystemExit):
            transformer_compare.main(["--repeats", repeats])
        assert "--repeats must be an int in [1, 100]" in capsys.readouterr().err

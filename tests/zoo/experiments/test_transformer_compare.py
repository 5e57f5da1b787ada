"""Tests of zoo.experiments.transformer_compare: the data of both tasks and a short run."""

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


def test_short_run_reports_both_paths():
    # One epoch: what is checked is that both paths train, predict and are scored.
    result = transformer_compare.run("concrete", epochs=1, num_samples=3)
    assert [(row["path"], row["mode"]) for row in result["rows"]] == [
        ("mc", "diagonal"), ("moments", "diagonal")]
    for row in result["rows"]:
        assert {"log_likelihood", "rmse", "coverage_95", "mean_stddev"} <= set(row), row
        assert np.isfinite(row["log_likelihood"]) and row["rmse"] > 0
        assert 0.0 <= row["coverage_95"] <= 1.0
    assert "| Monte Carlo (Flipout) |" in result["markdown"]
    assert "| moments (diagonal) |" in result["markdown"]


def test_bad_task_and_flags(capsys):
    with pytest.raises(ValueError, match="task"):
        transformer_compare.run("mnist")
    with pytest.raises(SystemExit):
        transformer_compare.main(["--samples", "0"])
    assert "--samples must be a positive int" in capsys.readouterr().err

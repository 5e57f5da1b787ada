"""Tests of zoo.run.runner: a run directory that is complete or absent, never half-written."""

import json
import math

import keras

import numpy as np
import pytest
import tensorflow as tf

from zoo.run import auto
from zoo.run import datasets
from zoo.run import runner
from zoo.run.candidates import Candidate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _read(path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "mc_dropout_concrete"
    result = runner.train_and_evaluate("mc_dropout_mlp", "concrete", out, epochs=3, seed=1,
                                       num_samples=50, verbose=0,
                                       overrides={"hidden_units": (16,)})
    return out, result


def test_regression_run_writes_every_artifact(regression_run):
    out, result = regression_run
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([".zoo-run", "config.json", "history.json", "model.keras",
                            "predictions.png", "preprocessing.json", "results.json",
                            "saved_model", "training.png"])
    for png in ("predictions.png", "training.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    stored = _read(out / "results.json")
    assert stored["rmse"] == pytest.approx(result["rmse"])
    for key in ("rmse", "log_likelihood", "coverage_95", "train_seconds"):
        assert math.isfinite(stored[key])
    assert 0.0 <= stored["coverage_95"] <= 1.0
    assert stored["num_test"] == 103 and stored["num_samples"] == 50
    # RMSE in MPa: the concrete strengths have a s.d. of about 16.7 MPa; a
    # model no better than the mean would score about that, a broken
    # rescaling would be off by that factor.
    assert 3.0 < stored["rmse"] < 25.0
    history = _read(out / "history.json")
    assert len(history["loss"]) == 3
    config = _read(out / "config.json")
    assert config["model"] == "mc_dropout_mlp" and config["epochs"] == 3
    assert config["overrides"] == {"hidden_units": [16]}


def test_regression_run_model_and_saved_model_reload(regression_run):
    out, _ = regression_run
    model = keras.saving.load_model(out / "model.keras", safe_mode=True)
    task = datasets.load("concrete", split=0, seed=1)
    raw = task.x_test_original[:5]  # both take raw rows and answer in MPa
    assert model.predict(raw[:4], verbose=0).shape == (4, 2)
    served = tf.saved_model.load(str(out / "saved_model"))
    summary = served.serve(tf.constant(raw), tf.constant(20))
    assert summary["mean"].shape[0] == 5
    assert np.all(np.isfinite(summary["stddev"].numpy()))
    assert np.all(summary["stddev"].numpy() > 0)
    # Concrete strengths lie in 2-83 MPa; standardised predictions would sit near 0.
    assert np.all((summary["mean"].numpy() > 2.0) & (summary["mean"].numpy() < 100.0))


def test_finished_run_directory_is_not_overwritten(regression_run):
    out, _ = regression_run
    with pytest.raises(ValueError, match="already holds a finished run"):
        runner.train_and_evaluate("mc_dropout_mlp", "concrete", out, epochs=1, verbose=0)


def test_foreign_directory_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and not a zoo run directory"):
        runner.train_and_evaluate("mc_dropout_mlp", "concrete", tmp_path, epochs=1, verbose=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_incompatible_model_and_dataset_write_nothing(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="flipout_lenet.*cannot train on 'concrete'"):
        runner.train_and_evaluate("flipout_lenet", "concrete", out, epochs=1, verbose=0)
    assert not out.exists()


def test_divergence_is_reported_and_leaves_no_results(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(FloatingPointError, match="diverged"):
        runner.train_and_evaluate("mc_dropout_mlp", "yacht", out, epochs=2, verbose=0,
                                  overrides={"learning_rate": 1e30})
    assert not (out / "results.json").exists()


def test_classification_run_and_evaluate(tmp_path):
    pytest.importorskip("sklearn")
    out = tmp_path / "lenet"
    result = runner.train_and_evaluate("flipout_lenet", "digits", out, epochs=6, seed=0,
                                       num_samples=20, verbose=0)
    for key in ("accuracy", "nll", "ece", "brier"):
        assert math.isfinite(result[key])
    # Ten balanced classes: chance is 0.1; six epochs of a LeNet beat it.
    assert result["accuracy"] > 0.2
    assert (out / "reliability.png").read_bytes()[:8] == PNG_MAGIC
    statistics = _read(out / "preprocessing.json")  # inputs as loaded; probabilities as they are
    assert statistics["y_mean"] is None and statistics["x_std"] == [1.0]
    stored, fresh = runner.evaluate(out, num_samples=20)
    assert stored["accuracy"] == pytest.approx(result["accuracy"])
    assert set(fresh) >= {"accuracy", "nll", "ece", "brier"}
    # Another draw of 20 weight samples: the NLL moves by Monte Carlo noise
    # only, far less than the 2.3 nats of a uniform guess.
    assert abs(fresh["nll"] - stored["nll"]) < 0.25


def test_evaluate_refuses_an_unfinished_directory(tmp_path):
    with pytest.raises(ValueError, match="not a finished zoo run.*results.json"):
        runner.evaluate(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size"), ({"num_samples": -1}, "num_samples"),
    ({"epochs": 0}, "epochs"),
    ({"overrides": {"decay_steps": 0}}, "may not hold 'decay_steps'.*--epochs"),
    ({"overrides": {"seed": 5}}, "may not hold 'seed'.*--seed")])
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        runner.train_and_evaluate("mc_dropout_mlp", "yacht", tmp_path / "run", verbose=0,
                                  **kwargs)


def test_default_epochs_follow_the_training_set_size():
    yacht = datasets.load("yacht")
    concrete = datasets.load("concrete")
    assert runner.default_epochs(yacht) == runner.MAX_EPOCHS
    # 927 examples in batches of 32 = 29 steps; 6000 / 29 = 207 epochs.
    assert runner.default_epochs(concrete) == 207


# Two tiny candidates: the search and the refit take seconds (the defaults take minutes).
TINY = (Candidate("tiny_dropout", "mc_dropout_mlp_heteroscedastic", {"hidden_units": (8,)},
                  batch_size=64, steps=40),
        Candidate("tiny_dvi", "dvi_mlp", {"hidden_units": (8,)}, batch_size=64, steps=40))


def test_auto_chooses_on_the_training_rows_then_trains_its_choice(tmp_path, monkeypatch):
    monkeypatch.setattr(auto, "CANDIDATES", TINY)
    out = tmp_path / "run"
    result = runner.train_and_evaluate("auto", "yacht", out, seed=2, num_samples=10, verbose=0)
    selection = result["selection"]
    chosen = next(c for c in TINY if c.name == selection["candidate"]["name"])
    assert [t["name"] for t in selection["trials"]] == ["tiny_dropout", "tiny_dvi"]
    config = _read(out / "config.json")
    # The run trains the chosen model with its settings; the LR decays as in its search run.
    assert (config["model"], result["model"]) == (chosen.model, chosen.model)
    assert config["batch_size"] == chosen.batch_size and config["epochs"] == selection["epochs"]
    assert config["overrides"] == {"hidden_units": [8]}
    searched = next(t for t in selection["trials"] if t["name"] == chosen.name)
    assert config["auto"] == {"budget_steps": None, "budget_minutes": None,
                              "decay_epochs": searched["max_epochs"]}
    assert _read(out / "results.json")["selection"] == selection
    assert math.isfinite(result["log_likelihood"])
    assert not (out / ".backup").exists()  # the checkpoint and the stored choice are gone


@pytest.mark.parametrize("kwargs, message", [
    ({"epochs": 3}, "`epochs` does not apply"), ({"batch_size": 16}, "`batch_size` does not"),
    ({"overrides": {"rate": 0.1}}, "`overrides` does not apply"),
    ({"budget_minutes": 0}, "budget_minutes"), ({"budget_minutes": float("nan")}, "budget"),
    ({"budget_steps": 0}, "`budget_steps` must be a positive int")])
def test_auto_refuses_settings_it_chooses_itself(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        runner.train_and_evaluate("auto", "yacht", tmp_path / "run", verbose=0, **kwargs)
    assert not (tmp_path / "run").exists()


def test_auto_is_for_regression_tables(tmp_path):
    with pytest.raises(ValueError, match="'auto' chooses among the zoo's regression models "
                                         "for tables; 'digits' is classification"):
        runner.train_and_evaluate("auto", "digits", tmp_path / "run", verbose=0)
    assert not (tmp_path / "run").exists()

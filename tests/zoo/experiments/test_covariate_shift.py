"""Tests of zoo.experiments.covariate_shift: the harness, its summary and tables, the script."""

import json
import math

import numpy as np
import pytest

from tfp_bnn.data.corruptions import CORRUPTIONS
from tfp_bnn.data.corruptions import corrupt
from tfp_bnn.data.digits import load_digits
from zoo.experiments import covariate_shift
from zoo.models import calibrated
from zoo.models import cheap_ensembles
from zoo.models import digits as digits_models
from zoo.models import posthoc

pytest.importorskip("sklearn")

NUM_SAMPLES = 3


@pytest.fixture(scope="module")
def data():
    # A quarter of the training split keeps the fits short; the whole test split.
    full = load_digits(seed=0)
    return {**full, "x_train": full["x_train"][::4], "y_train": full["y_train"][::4]}


@pytest.fixture(scope="module")
def models(data):
    """A small deterministic MLP and a small Flipout CNN, trained 2 epochs."""
    num_train = len(data["x_train"])
    trained = {
        "mlp": digits_models.deterministic_mlp(**digits_models.DIGITS, hidden_units=(32,),
                                               learning_rate=1e-2, seed=0),
        "bnn": digits_models.flipout_cnn(**digits_models.DIGITS, num_train=num_train,
                                         filters=(4, 8), hidden_units=(16,),
                                         learning_rate=1e-2, seed=0),
    }
    for model in trained.values():
        digits_models.train(model, data, epochs=2, batch_size=32, seed=0)
    return trained


@pytest.fixture(scope="module")
def rows(models, data):
    return covariate_shift.evaluate_under_shift(models, data, num_samples=NUM_SAMPLES, seed=0)


def test_one_row_per_model_and_test_set(rows):
    num_sets = 1 + len(CORRUPTIONS) * 5
    assert len(rows) == 2 * num_sets
    assert [row["model"] for row in rows] == ["mlp"] * num_sets + ["bnn"] * num_sets
    for model in ("mlp", "bnn"):
        mine = [row for row in rows if row["model"] == model]
        assert (mine[0]["corruption"], mine[0]["intensity"]) == ("clean", 0)
        pairs = {(row["corruption"], row["intensity"]) for row in mine[1:]}
        assert pairs == {(name, level) for name in CORRUPTIONS for level in range(1, 6)}


def test_values_are_finite_and_in_range(rows):
    for row in rows:
        assert set(row) == {"model", "corruption", "intensity", "accuracy", "nll", "ece",
                            "num_samples"}
        assert 0.0 <= row["accuracy"] <= 1.0
        assert math.isfinite(row["nll"]) and row["nll"] > 0.0
        assert 0.0 <= row["ece"] <= 1.0
    # Two epochs on 360 digits already beat chance (10%) on the clean set.
    assert all(row["accuracy"] > 0.3 for row in rows if row["intensity"] == 0)


def test_deterministic_models_use_one_sample(rows):
    assert {row["num_samples"] for row in rows if row["model"] == "mlp"} == {1}
    assert {row["num_samples"] for row in rows if row["model"] == "bnn"} == {NUM_SAMPLES}


def test_clean_row_matches_the_models_own_predictions(models, data, rows):
    logits = models["mlp"].predict(data["x_test"], verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == data["y_test"]))
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    nll = float(-np.mean(log_probs[np.arange(len(logits)), data["y_test"]]))
    clean = rows[0]
    assert clean["accuracy"] == pytest.approx(accuracy)
    assert clean["nll"] == pytest.approx(nll, rel=1e-4)


def test_corrupted_rows_score_the_corrupted_images(models, data, rows):
    x = corrupt(data["x_test"], "rotation", 4, seed=0)
    logits = models["mlp"].predict(x, verbose=0)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == data["y_test"]))
    row = next(r for r in rows if (r["model"], r["corruption"], r["intensity"])
               == ("mlp", "rotation", 4))
    assert row["accuracy"] == pytest.approx(accuracy)


def test_subset_of_corruptions_and_intensities(models, data):
    rows = covariate_shift.evaluate_under_shift(
        {"mlp": models["mlp"]}, data, corruptions=["contrast", "rotation"], intensities=(5, 1))
    assert [(r["corruption"], r["intensity"]) for r in rows] == [
        ("clean", 0), ("contrast", 5), ("contrast", 1), ("rotation", 5), ("rotation", 1)]


@pytest.mark.parametrize(
    "kwargs, message",
    [({"corruptions": ["fog"]}, r"`corruptions` must be some of .*'rotation'.*got \['fog'\]"),
     ({"corruptions": ["rotation", "rotation"]}, "twice"),
     ({"intensities": (0, 1)}, r"`intensities` must be an int in 1\.\.5, got 0"),
     ({"intensities": (2.0,)}, r"`intensities` must be an int in 1\.\.5, got 2\.0"),
     ({"intensities": (2, 2)}, "twice"),
     ({"num_samples": 0}, "num_samples")],
)
def test_bad_arguments(models, data, kwargs, message):
    with pytest.raises(ValueError, match=message):
        covariate_shift.evaluate_under_shift({"mlp": models["mlp"]}, data, **kwargs)


def test_bad_models_or_data(models, data):
    with pytest.raises(ValueError, match="non-empty dict"):
        covariate_shift.evaluate_under_shift({}, data)
    with pytest.raises(ValueError, match="'y_test'"):
        covariate_shift.evaluate_under_shift(models, {"x_test": data["x_test"]})


def test_format_table_of_the_harness(rows):
    table = covariate_shift.format_table(covariate_shift.summarize(rows))
    header = "| model | clean | 1 | 2 | 3 | 4 | 5 | mean 1-5 |"
    assert table.count(header) == 3
    for model in ("mlp", "bnn"):
        assert table.count(f"| {model} | ") == 3


def test_trainers_registry_has_the_four_families_and_the_post_hoc_cnns():
    # Per architecture: deterministic, Flipout, node-BNN (Gaussian), node-BNN (flow); then
    # the deterministic CNN made Bayesian after training; then calibrated and cheap
    # ensembles of the same CNN.
    assert list(covariate_shift.TRAINERS) == [
        "deterministic_mlp", "flipout_mlp", "node_bnn_mlp_gaussian", "node_bnn_mlp_flow",
        "deterministic_cnn", "flipout_cnn", "node_bnn_cnn_gaussian", "node_bnn_cnn_flow",
        "bayesianized_cnn", "laplace_cnn", "temperature_cnn", "swag_cnn",
        "batch_ensemble_cnn", "packed_cnn"]
    trainers = covariate_shift.TRAINERS
    assert trainers["bayesianized_cnn"] is posthoc.bayesianized_cnn
    assert trainers["laplace_cnn"] is posthoc.laplace_cnn
    assert trainers["temperature_cnn"] is calibrated.temperature_cnn
    assert trainers["swag_cnn"] is cheap_ensembles.swag_cnn
    assert trainers["packed_cnn"].builder is cheap_ensembles.packed_cnn
    assert trainers["deterministic_cnn"].builder is digits_models.deterministic_cnn
    assert covariate_shift.STAGE1 == {"bayesianized_cnn": "deterministic_cnn",
                                      "laplace_cnn": "deterministic_cnn"}


class _Recording:
    """A trainer that calls `trainer` and keeps each call's keyword arguments and result."""

    def __init__(self, trainer):
        self.trainer, self.calls = trainer, []

    def __call__(self, data, **kwargs):
        result = self.trainer(data, **kwargs)
        self.calls.append((kwargs, result))
        return result


@pytest.fixture(scope="module")
def two_stage_run():
    """run() with a tiny deterministic CNN and its Laplace.

    `bayesianized_cnn` takes the same path (STAGE1, `pretrained=`); scoring a Flipout CNN on
    the 26 test sets would double this fixture's time, and tests/zoo/models/test_posthoc.py
    runs it with `pretrained=`.
    """
    trainers = {
        "deterministic_cnn": _Recording(digits_models.BuildAndTrain(
            digits_models.deterministic_cnn, filters=(4, 8), hidden_units=(16,))),
        "laplace_cnn": _Recording(posthoc.laplace_cnn),
    }
    return trainers, covariate_shift.run(epochs=1, num_samples=NUM_SAMPLES, trainers=trainers)


def test_run_starts_the_two_stage_rows_from_the_deterministic_row(two_stage_run):
    trainers, result = two_stage_run
    [(_, stage1)] = trainers["deterministic_cnn"].calls
    [(kwargs, trained)] = trainers["laplace_cnn"].calls
    assert kwargs["pretrained"] is stage1
    assert kwargs["seed"] == 0 and kwargs["epochs"] == 1
    # Its train seconds are the deterministic row's plus its own second stage's.
    assert result["train_seconds"]["laplace_cnn"] > result["train_seconds"]["deterministic_cnn"]
    assert result["stage2_seconds"] == {"laplace_cnn": trained.details["posthoc_seconds"]}
    assert result["details"] == {"laplace_cnn": trained.details}
    assert trained.details["prior_precision"] > 0


def test_run_scores_the_two_stage_rows_by_monte_carlo(two_stage_run):
    _, result = two_stage_run
    samples = {row["model"]: row["num_samples"] for row in result["rows"]}
    assert samples == {"deterministic_cnn": 1, "laplace_cnn": NUM_SAMPLES}
    lines = result["markdown"].splitlines()
    assert "| model | MC samples T | train s | of which stage 2 s |" in lines
    assert any(line.startswith("| deterministic_cnn | 1 | ") and line.endswith(" | – |")
               for line in lines)
    assert result["markdown"].count("| laplace_cnn | ") == 4  # 3 metric tables + timing


def test_show_writes_json_for_a_json_out(two_stage_run, capsys):
    _, result = two_stage_run
    assert covariate_shift._show(result, "shift.md")[1] == result["markdown"]
    text = covariate_shift._show(result, "shift.json")[1]
    loaded = json.loads(text)
    assert loaded["rows"] == json.loads(json.dumps(result["rows"]))
    assert loaded["details"]["laplace_cnn"]["prior_precision"] == pytest.approx(
        result["details"]["laplace_cnn"]["prior_precision"])
    assert "| laplace_cnn | " in capsys.readouterr().out


def test_run_refuses_unknown_names():
    with pytest.raises(ValueError, match=r"`names` must be some of .*got \['fog'\]"):
        covariate_shift.run(epochs=1, names=["fog"])


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be a positive int"),
    (["--samples", "-2"], "--samples must be a positive int"),
    (["--seed", "-1"], "--seed must be a non-negative int"),
    (["--models", "nope"], "--models must name some of"),
    (["--repeats", "0"], "--repeats must be a positive int"),
])
def test_main_rejects_bad_flags(capsys, argv, message):
    with pytest.raises(SystemExit):
        covariate_shift.main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_script_runs_end_to_end(tmp_path, capsys):
    # In-process: `main` is what `python -m zoo.experiments.covariate_shift` runs, and a
    # subprocess would only add TensorFlow's import. Two of the eight builders, one
    # deterministic (1 sample) and one stochastic, take every path of the script; each
    # builder has its own tests (tests/zoo/models).
    out = tmp_path / "shift.md"
    names = ["deterministic_mlp", "flipout_cnn"]
    argv = ["--epochs", "1", "--samples", "2", "--models", ",".join(names), "--out", str(out)]
    assert covariate_shift.main(argv) == 0
    stdout = capsys.readouterr().out
    header = "| model | clean | 1 | 2 | 3 | 4 | 5 | mean 1-5 |"
    assert stdout.count(header) == 3, stdout
    for name in covariate_shift.TRAINERS:
        expected = 4 if name in names else 0  # 3 metric tables + timing
        assert stdout.count(f"| {name} | ") == expected, stdout
        assert (f"{name}: " in stdout) == (name in names), stdout
    assert "trained in" in stdout
    assert "1438 train / 359 test" in stdout
    written = out.read_text()
    assert written.count(header) == 3
    assert written in stdout




def test_samples_for_counts_an_ensembles_members():
    ensemble = cheap_ensembles.packed_cnn(**digits_models.DIGITS, seed=0, num_members=4,
                                          filters=(4, 8), hidden_units=(16,))
    cnn = digits_models.deterministic_cnn(**digits_models.DIGITS, seed=0, filters=(4,),
                                          hidden_units=(8,))
    bnn = digits_models.flipout_cnn(**digits_models.DIGITS, num_train=100, seed=0,
                                    filters=(4,), hidden_units=(8,))
    assert covariate_shift.samples_for(ensemble, 100) == 4   # its exact mixture
    assert covariate_shift.samples_for(cnn, 100) == 1
    assert covariate_shift.samples_for(bnn, 100) == 100

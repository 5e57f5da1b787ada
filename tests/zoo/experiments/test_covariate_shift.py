"""Tests of zoo.experiments.covariate_shift: the harness, its summary and tables, the script."""

import math

import numpy as np
import pytest

from tfp_bnn.data.corruptions import CORRUPTIONS
from tfp_bnn.data.corruptions import corrupt
from tfp_bnn.data.digits import load_digits
from zoo.experiments import covariate_shift
from zoo.models import digits as digits_models

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


def _row(model, corruption, intensity, accuracy, nll, ece):
    return {"model": model, "corruption": corruption, "intensity": intensity,
            "accuracy": accuracy, "nll": nll, "ece": ece, "num_samples": 1}


SYNTHETIC = [
    _row("b", "clean", 0, 0.9, 0.3, 0.05),
    _row("b", "x", 2, 0.5, 1.0, 0.20),
    _row("b", "y", 2, 0.7, 2.0, 0.10),
    _row("b", "x", 1, 0.8, 0.5, 0.10),
    _row("b", "y", 1, 0.6, 0.7, 0.30),
    _row("a", "clean", 0, 1.0, 0.1, 0.01),
    _row("a", "x", 1, 0.4, 3.0, 0.40),
    _row("a", "y", 1, 0.2, 5.0, 0.60),
    _row("a", "x", 2, 0.1, 6.0, 0.70),
    _row("a", "y", 2, 0.3, 8.0, 0.50),
]


def test_summarize_means_over_corruptions():
    summary = covariate_shift.summarize(SYNTHETIC)
    assert [(e["model"], e["intensity"]) for e in summary] == [
        ("b", 0), ("b", 1), ("b", 2), ("a", 0), ("a", 1), ("a", 2)]
    by_key = {(e["model"], e["intensity"]): e for e in summary}
    assert by_key["b", 2]["accuracy"] == pytest.approx(0.6)
    assert by_key["b", 2]["nll"] == pytest.approx(1.5)
    assert by_key["a", 1]["ece"] == pytest.approx(0.5)
    assert by_key["a", 0]["nll"] == pytest.approx(0.1)
    assert [e["count"] for e in summary] == [1, 2, 2, 1, 2, 2]


def test_format_table_content():
    table = covariate_shift.format_table(covariate_shift.summarize(SYNTHETIC),
                                         train_seconds={"a": 1.44, "b": 12.0})
    lines = table.splitlines()
    assert lines.count("| model | clean | 1 | 2 | mean 1-2 |") == 3
    assert lines.count("|---|---:|---:|---:|---:|") == 3
    nll = lines.index("| model | clean | 1 | 2 | mean 1-2 |")
    assert lines[nll - 2].startswith("NLL")
    # Rows in order of first appearance; mean 1-2 = mean of the two columns.
    assert lines[nll + 2] == "| b | 0.300 | 0.600 | 1.500 | 1.050 |"
    assert lines[nll + 3] == "| a | 0.100 | 4.000 | 7.000 | 5.500 |"
    assert "| b | 90.0 | 70.0 | 60.0 | 65.0 |" in lines  # accuracy in %
    assert "| a | 0.010 | 0.500 | 0.600 | 0.550 |" in lines  # ECE
    assert "| model | MC samples T | train s |" in lines
    assert "| a | 1 | 1.4 |" in lines
    assert "| b | 1 | 12.0 |" in lines
    assert "train s" not in covariate_shift.format_table(covariate_shift.summarize(SYNTHETIC))


def test_format_table_of_the_harness(rows):
    table = covariate_shift.format_table(covariate_shift.summarize(rows))
    header = "| model | clean | 1 | 2 | 3 | 4 | 5 | mean 1-5 |"
    assert table.count(header) == 3
    for model in ("mlp", "bnn"):
        assert table.count(f"| {model} | ") == 3


def test_builders_registry_has_the_four_families():
    # Per architecture: deterministic, Flipout, node-BNN (Gaussian), node-BNN (flow).
    assert list(covariate_shift.BUILDERS) == [
        "deterministic_mlp", "flipout_mlp", "node_bnn_mlp_gaussian", "node_bnn_mlp_flow",
        "deterministic_cnn", "flipout_cnn", "node_bnn_cnn_gaussian", "node_bnn_cnn_flow"]


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
    for name in covariate_shift.BUILDERS:
        expected = 4 if name in names else 0  # 3 metric tables + timing
        assert stdout.count(f"| {name} | ") == expected, stdout
        assert (f"{name}: " in stdout) == (name in names), stdout
    assert "trained in" in stdout
    assert "1438 train / 359 test" in stdout
    written = out.read_text()
    assert written.count(header) == 3
    assert written in stdout


def test_aggregate_seeds_gives_mean_and_standard_error():
    first = covariate_shift.summarize(SYNTHETIC)
    second = [{**entry, "nll": entry["nll"] + 1.0, "accuracy": entry["accuracy"] / 2}
              for entry in first]
    aggregated = covariate_shift.aggregate_seeds([first, second])
    assert [(e["model"], e["intensity"]) for e in aggregated] == [
        (e["model"], e["intensity"]) for e in first]
    for entry, one, two in zip(aggregated, first, second):
        assert entry["nll"] == pytest.approx(one["nll"] + 0.5)
        # Two values a, a + 1: sample std 1/sqrt(2), s.e. = 1/2.
        assert entry["nll_se"] == pytest.approx(0.5)
        spread = abs(one["accuracy"] - two["accuracy"])
        assert entry["accuracy_se"] == pytest.approx(spread / 2)
        assert entry["ece_se"] == 0.0 and entry["seeds"] == 2
    table = covariate_shift.format_table(aggregated)
    assert "| b | 0.800 ± 0.500 | 1.100 ± 0.500 | 2.000 ± 0.500 | 1.550 |" in table


def test_aggregate_seeds_refuses_one_seed_or_mismatched_runs():
    summary = covariate_shift.summarize(SYNTHETIC)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        covariate_shift.aggregate_seeds([summary])
    with pytest.raises(ValueError, match="same models and intensities"):
        covariate_shift.aggregate_seeds([summary, summary[:-1]])
    with pytest.raises(ValueError, match="at least 2 distinct seeds"):
        covariate_shift.run_seeds([3, 3])

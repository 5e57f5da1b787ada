"""Tests of zoo.experiments.shift_tables: per-intensity summaries, seed means, the tables."""

import pytest

from zoo.experiments import shift_tables


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
    summary = shift_tables.summarize(SYNTHETIC)
    assert [(e["model"], e["intensity"]) for e in summary] == [
        ("b", 0), ("b", 1), ("b", 2), ("a", 0), ("a", 1), ("a", 2)]
    by_key = {(e["model"], e["intensity"]): e for e in summary}
    assert by_key["b", 2]["accuracy"] == pytest.approx(0.6)
    assert by_key["b", 2]["nll"] == pytest.approx(1.5)
    assert by_key["a", 1]["ece"] == pytest.approx(0.5)
    assert by_key["a", 0]["nll"] == pytest.approx(0.1)
    assert [e["count"] for e in summary] == [1, 2, 2, 1, 2, 2]


def test_format_table_content():
    table = shift_tables.format_table(shift_tables.summarize(SYNTHETIC),
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
    assert "train s" not in shift_tables.format_table(shift_tables.summarize(SYNTHETIC))


def test_format_table_gives_the_second_stage_seconds_of_two_stage_models():
    table = shift_tables.format_table(shift_tables.summarize(SYNTHETIC),
                                      train_seconds={"a": 1.44, "b": 12.0},
                                      stage2_seconds={"b": 0.75})
    lines = table.splitlines()
    assert "| model | MC samples T | train s | of which stage 2 s |" in lines
    assert "|---|---:|---:|---:|" in lines
    assert "| b | 1 | 12.0 | 0.8 |" in lines
    assert "| a | 1 | 1.4 | – |" in lines


def test_aggregate_seeds_gives_mean_and_standard_error():
    first = shift_tables.summarize(SYNTHETIC)
    second = [{**entry, "nll": entry["nll"] + 1.0, "accuracy": entry["accuracy"] / 2}
              for entry in first]
    aggregated = shift_tables.aggregate_seeds([first, second])
    assert [(e["model"], e["intensity"]) for e in aggregated] == [
        (e["model"], e["intensity"]) for e in first]
    for entry, one, two in zip(aggregated, first, second):
        assert entry["nll"] == pytest.approx(one["nll"] + 0.5)
        # Two values a, a + 1: sample std 1/sqrt(2), s.e. = 1/2.
        assert entry["nll_se"] == pytest.approx(0.5)
        spread = abs(one["accuracy"] - two["accuracy"])
        assert entry["accuracy_se"] == pytest.approx(spread / 2)
        assert entry["ece_se"] == 0.0 and entry["seeds"] == 2
    table = shift_tables.format_table(aggregated)
    assert "| b | 0.800 ± 0.500 | 1.100 ± 0.500 | 2.000 ± 0.500 | 1.550 |" in table


def test_aggregate_seeds_refuses_one_seed_or_mismatched_runs():
    summary = shift_tables.summarize(SYNTHETIC)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        shift_tables.aggregate_seeds([summary])
    with pytest.raises(ValueError, match="same models and intensities"):
        shift_tables.aggregate_seeds([summary, summary[:-1]])

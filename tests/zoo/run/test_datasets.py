"""Tests of zoo.run.datasets: built-in names, UCI-layout directories, series CSVs."""

import pathlib

import numpy as np
import pytest

from zoo.run import datasets

SHARED_UCI = pathlib.Path(__file__).resolve().parents[4] / "shared" / "data" / "uci"


@pytest.mark.parametrize("name, rows, features", [
    ("concrete", 1030, 8), ("energy", 768, 8), ("yacht", 308, 6),
    ("wine-quality-red", 1599, 11)])
def test_builtin_uci_tables(name, rows, features):
    task = datasets.load(name, split=3, seed=1)
    assert task.task == "regression" and task.kind == "table"
    assert task.input_shape == (features,)
    assert len(task.x_train) + len(task.x_test) == rows
    # A 90/10 split: the test share rounds to a tenth of the rows.
    assert len(task.x_test) == pytest.approx(rows / 10, abs=1)
    # Training statistics only: the training target is exactly standardised.
    assert np.mean(task.y_train) == pytest.approx(0.0, abs=1e-5)
    assert np.std(task.y_train) == pytest.approx(1.0, abs=1e-4)
    assert "seeded 90/10 split 3" in task.description


def test_builtin_splits_depend_on_split_and_seed():
    first = datasets.load("yacht", split=0, seed=0)
    same = datasets.load("yacht", split=0, seed=0)
    other_split = datasets.load("yacht", split=1, seed=0)
    np.testing.assert_array_equal(first.x_test, same.x_test)
    assert not np.array_equal(first.y_test_original, other_split.y_test_original)


def test_y_test_original_undoes_the_scaling():
    task = datasets.load("concrete", split=0)
    raw = np.loadtxt(datasets.UCI_BUILTIN["concrete"] / "data.txt")[:, -1]
    # Every rescaled test target is one of the raw strengths (float32 rounding).
    gaps = np.min(np.abs(task.y_test_original[:, None] - raw[None, :]), axis=1)
    assert gaps.max() < 1e-3


@pytest.mark.skipif(not SHARED_UCI.is_dir(), reason="../shared/data/uci is not present")
def test_uci_directory_uses_its_standard_splits():
    task = datasets.load(SHARED_UCI / "energy", split=5)
    index = np.loadtxt(SHARED_UCI / "energy" / "data" / "index_test_5.txt", dtype=int)
    assert len(task.x_test) == len(index)
    assert "standard split 5" in task.description
    with pytest.raises(ValueError, match="out of range.*20 splits"):
        datasets.load(SHARED_UCI / "energy", split=20)


def test_uci_directory_without_split_files_gets_seeded_splits(tmp_path):
    rng = np.random.default_rng(0)
    np.savetxt(tmp_path / "data.txt", rng.normal(size=(50, 4)))
    task = datasets.load(tmp_path, split=2, seed=7)
    assert task.input_shape == (3,)
    assert len(task.x_test) == 5
    assert "seeded 90/10 split 2" in task.description


def test_digits_and_sunspots():
    pytest.importorskip("sklearn")
    digits = datasets.load("digits")
    assert digits.task == "classification" and digits.num_classes == 10
    assert digits.input_shape == (8, 8, 1) and digits.kind == "image"
    spots = datasets.load("sunspots")
    assert spots.kind == "sequence" and spots.input_shape == (datasets.WINDOW, 1)
    assert len(spots.x_test) == datasets.TEST_SIZE


def test_series_csv_path(tmp_path):
    values = np.sin(np.arange(400) / 5.0) * 10 + 50
    lines = ["date,value"] + [f"2000-01-{i:04d},{v:.4f}" for i, v in enumerate(values)]
    path = tmp_path / "wave.csv"
    path.write_text("\n".join(lines) + "\n")
    task = datasets.load(path)
    assert task.name == "wave" and task.input_shape == (datasets.WINDOW, 1)
    # The last TEST_SIZE targets, back in the series' units.
    np.testing.assert_allclose(task.y_test_original, values[-datasets.TEST_SIZE:], atol=1e-3)


def test_describe_builtin_covers_every_name():
    assert [row[0] for row in datasets.describe_builtin()] == list(datasets.BUILTIN)

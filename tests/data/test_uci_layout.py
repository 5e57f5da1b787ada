"""Tests of tfp_bnn.data.uci_layout on the shared UCI sets and on written directories."""

import pathlib

import numpy as np
import pytest

from tfp_bnn.data.uci_layout import UCIDataset

SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "uci"
EXPECTED = {  # name: (rows, features, target column)
    "concrete": (1030, 8, 8), "energy": (768, 8, 8), "kin8nm": (8192, 8, 8),
    "wine-quality-red": (1599, 11, 11), "yacht": (308, 6, 6),
}

needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared/data is not here")


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_datasets_load_with_their_20_standard_splits(name):
    rows, features, target = EXPECTED[name]
    data = UCIDataset(SHARED / name)
    assert data.name == name and data.x.shape == (rows, features) and data.y.shape == (rows,)
    table = np.loadtxt(SHARED / name / "data" / "data.txt")
    np.testing.assert_array_equal(data.y, table[:, target])
    assert len(data.splits) == 20
    for train, test in data.splits:
        assert len(np.intersect1d(train, test)) == 0
        assert len(train) + len(test) <= rows and len(test) >= 0.05 * rows


@needs_shared
def test_split_is_standardised_with_training_statistics_only():
    data = UCIDataset(SHARED / "concrete")
    split = data.split(3)
    train, test = data.splits[3]
    np.testing.assert_allclose(split["x_train"].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(split["y_train"].std(), 1, rtol=1e-5)
    np.testing.assert_allclose(split["y_scaler"].inverse_transform(split["y_test"]),
                               data.y[test], rtol=1e-5)
    np.testing.assert_array_equal(split["y_test_raw"], data.y[test])
    assert split["y_scaler"].mean[()] == pytest.approx(data.y[train].mean())


def _write(directory, text_by_name):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in text_by_name.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


TABLE = "".join(f"{i} {2 * i} {i % 3} {10 + i}\n" for i in range(20))


def test_without_index_files_the_last_column_is_the_target_and_splits_are_generated(tmp_path):
    directory = _write(tmp_path / "toy", {"data.txt": TABLE})
    data = UCIDataset(directory, num_splits=3, seed=5)
    assert data.x.shape == (20, 3) and data.y[0] == 10
    assert len(data.splits) == 3 and [len(test) for _, test in data.splits] == [2, 2, 2]
    again = UCIDataset(directory, num_splits=3, seed=5)
    for (a, b), (c, d) in zip(data.splits, again.splits):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert not np.array_equal(data.splits[0][1], data.splits[1][1])

"""Tests of tfp_bnn.data.uci: parser, packaged concrete, split, standardiser."""

import re

import numpy as np
import pytest

from tfp_bnn.data import Standardizer
from tfp_bnn.data import concrete_path
from tfp_bnn.data import load_concrete
from tfp_bnn.data import read_table
from tfp_bnn.data import train_test_split


def _write(tmp_path, text, name="table.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


# -- read_table ---------------------------------------------------------------
def test_read_table_parses_and_skips_blank_lines(tmp_path):
    path = _write(tmp_path, "1 2.5\t3\n\n  -4e1 0 7  \n\n")
    table = read_table(path)
    np.testing.assert_array_equal(table, [[1.0, 2.5, 3.0], [-40.0, 0.0, 7.0]])
    assert table.dtype == np.float64


def test_read_table_checks_the_expected_column_count(tmp_path):
    path = _write(tmp_path, "1 2 3\n4 5 6\n")
    assert read_table(path, num_columns=3).shape == (2, 3)
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 1: expected 4 columns")):
        read_table(path, num_columns=4)


def test_read_table_rejects_empty_files_and_bad_arguments(tmp_path):
    path = _write(tmp_path, "\n  \n")
    with pytest.raises(ValueError, match="no data rows"):
        read_table(path)
    with pytest.raises(ValueError, match="num_columns"):
        read_table(path, num_columns=0)


# -- concrete -----------------------------------------------------------------
def test_concrete_is_packaged_with_its_attribution():
    path = concrete_path()
    assert path.is_file()
    readme = (path.parent / "README.md").read_text()
    assert "I-Cheng Yeh" in readme and "CC BY 4.0" in readme


def test_load_concrete_shapes_and_values():
    x, y = load_concrete()
    assert x.shape == (1030, 8) and y.shape == (1030,)
    assert x.dtype == np.float32 and y.dtype == np.float32
    # First row of the UCI table: 540 kg cement, ..., 28 days, 79.99 MPa.
    np.testing.assert_allclose(x[0], [540.0, 0.0, 0.0, 162.0, 2.5, 1040.0, 676.0, 28.0])
    np.testing.assert_allclose(y[0], 79.99, rtol=1e-6)
    # Compressive strengths lie between 2 and 83 MPa; ages between 1 and 365 days.
    assert 2.0 < y.min() and y.max() < 83.0
    assert x[:, 7].min() == 1.0 and x[:, 7].max() == 365.0
    x64, _ = load_concrete(dtype="float64")
    assert x64.dtype == np.float64


# -- train_test_split ----------------------------------------------------------
def test_split_sizes_and_disjointness():
    train, test = train_test_split(1030, test_fraction=0.1, seed=0)
    assert len(train) == 927 and len(test) == 103
    assert np.intersect1d(train, test).size == 0
    np.testing.assert_array_equal(np.union1d(train, test), np.arange(1030))
    assert train.dtype == np.int64 and test.dtype == np.int64


def test_split_is_reproducible_and_depends_on_the_seed():
    first = train_test_split(1030, seed=3)
    again = train_test_split(1030, seed=3)
    other = train_test_split(1030, seed=4)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[1], other[1])


def test_split_keeps_both_sides_non_empty():
    train, test = train_test_split(2, test_fraction=0.01, seed=0)
    assert len(train) == 1 and len(test) == 1
    train, test = train_test_split(5, test_fraction=0.99, seed=0)
    assert len(train) == 1 and len(test) == 4


@pytest.mark.parametrize("kwargs", [{"n": 1}, {"n": 10, "test_fraction": 0.0},
                                    {"n": 10, "test_fraction": 1.0}, {"n": True}])
def test_split_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        train_test_split(**kwargs)


# -- Standardizer --------------------------------------------------------------
def test_standardizer_uses_the_statistics_it_was_fitted_on():
    rng = np.random.default_rng(0)
    train = rng.normal(3.0, 2.0, size=(50, 3))
    test = rng.normal(-10.0, 5.0, size=(20, 3))
    scaler = Standardizer().fit(train)
    np.testing.assert_allclose(scaler.mean, train.mean(axis=0))
    np.testing.assert_allclose(scaler.std, train.std(axis=0))
    z_train = scaler.transform(train)
    np.testing.assert_allclose(z_train.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z_train.std(axis=0), 1.0, rtol=1e-12)
    # Test data are mapped with the training statistics, not their own.
    np.testing.assert_allclose(scaler.transform(test), (test - train.mean(0)) / train.std(0))
    np.testing.assert_allclose(scaler.inverse_transform(scaler.transform(test)), test)


def test_standardizer_on_concrete_train_split_only():
    x, y = load_concrete()
    train, test = train_test_split(len(x), seed=0)
    scaler = Standardizer().fit(y[train])
    assert scaler.mean == pytest.approx(float(np.mean(y[train].astype(np.float64))))
    assert scaler.mean != pytest.approx(float(np.mean(y.astype(np.float64))), abs=1e-6)
    z = scaler.transform(y[test])
    assert z.dtype == np.float32 and z.shape == (103,)


def test_standardizer_zero_variance_column():
    data = np.array([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]], dtype=np.float32)
    scaler = Standardizer().fit(data)
    assert scaler.std[1] == 1.0
    z = scaler.transform(np.array([[1.0, 5.0], [2.0, 7.0]], dtype=np.float32))
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(z[:, 1], [0.0, 2.0])
    np.testing.assert_allclose(scaler.inverse_transform(z), [[1.0, 5.0], [2.0, 7.0]], rtol=1e-6)


def test_standardizer_must_be_fitted_first():
    with pytest.raises(ValueError, match="not fitted"):
        Standardizer().transform(np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least one row"):
        Standardizer().fit(np.ones((0, 3)))

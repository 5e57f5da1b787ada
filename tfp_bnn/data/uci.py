"""UCI regression benchmarks: the data, the split, the normalisation.

The protocol of Hernandez-Lobato and Adams (2015), used by every Bayesian
deep-learning paper that reports UCI numbers: random 90/10 train/test
splits, inputs and targets standardised with statistics of the training
split only, test RMSE and test log-likelihood reported in the original
units of the target. This module holds each of those steps; `zoo.cli`
strings them together.
"""

import errno
import math
import os
import pathlib
from importlib import resources

import numpy as np

CONCRETE_NUM_FEATURES = 8


def text_lines(path):
    """Yields (1-based line number, line) of a UTF-8 text file.

    Raises:
        ValueError: naming the file for a path that is missing, a directory
            or unreadable, and the line for bytes that are not UTF-8 text.
    """
    path = os.fspath(path)
    try:
        handle = open(path, "rb")
    except OSError as error:
        reason = {errno.ENOENT: "no such file", errno.EISDIR: "is a directory, not a file",
                  errno.EACCES: "permission denied"}.get(error.errno, error.strerror)
        raise ValueError(f"{path}: cannot read the data file ({reason}).") from error
    with handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}, line {line_number}: not UTF-8 text (a binary or "
                                 "corrupted file?).") from None


def read_table(path, num_columns=None):
    """Reads a whitespace-separated table of numbers, one row per line.

    Blank lines are skipped. A malformed line fails loudly instead of being
    silently dropped or turned into NaN, because a benchmark number computed
    on a corrupted table looks just like a real one.

    Args:
        path: file to read (str or path-like).
        num_columns: expected number of columns, or None to take the column
            count of the first row and require it of every other row.

    Returns:
        float64 array of shape (rows, columns).

    Raises:
        ValueError: naming the file and the 1-based line number, for a line
            with the wrong number of columns, a field that is not a number,
            or a NaN/inf value, or bytes that are not text; naming the file
            for a missing or unreadable file or one without any row.

    Example:
    >>> table = read_table("tfp_bnn/data/concrete/data.txt", num_columns=9)
    >>> table.shape
    (1030, 9)
    """
    path = os.fspath(path)
    if num_columns is not None and (
        isinstance(num_columns, bool) or not isinstance(num_columns, int) or num_columns <= 0
    ):
        raise ValueError(f"`num_columns` must be a positive int or None, got {num_columns!r}.")
    rows = []
    for line_number, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}, line {line_number}"
        if num_columns is None:
            num_columns = len(fields)
        if len(fields) != num_columns:
            raise ValueError(
                f"{where}: expected {num_columns} columns, found {len(fields)}."
            )
        row = []
        for column, field in enumerate(fields, start=1):
            try:
                value = float(field)
            except ValueError:
                raise ValueError(
                    f"{where}, column {column}: {field!r} is not a number."
                ) from None
            if not math.isfinite(value):
                raise ValueError(
                    f"{where}, column {column}: {field!r} is not a finite number."
                )
            row.append(value)
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: the file holds no data rows.")
    return np.asarray(rows, dtype=np.float64)


def concrete_path():
    """Path of the packaged concrete table (see data/concrete/README.md)."""
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


def check_seed(seed):
    """A seed as a Python int >= 0 (what np.random.default_rng accepts)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    return int(seed)


def check_fraction(test_fraction):
    """A test share as a float in (0, 1)."""
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.number)):
        raise ValueError(f"`test_fraction` must be a number in (0, 1), got {test_fraction!r}.")
    test_fraction = float(test_fraction)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"`test_fraction` must lie in (0, 1), got {test_fraction!r}.")
    return test_fraction


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
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"`n` must be an int >= 2, got {n!r}.")
    test_fraction = check_fraction(test_fraction)
    seed = check_seed(seed)
    num_test = min(max(int(round(n * test_fraction)), 1), n - 1)
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
    >>> scaler = Standardizer().fit(x[train])
    >>> z_test = scaler.transform(x[test])
    >>> np.allclose(scaler.inverse_transform(z_test), x[test])
    True
    """

    def __init__(self, epsilon=1e-12):
        epsilon = float(epsilon)
        if not math.isfinite(epsilon) or epsilon < 0:
            raise ValueError(f"`epsilon` must be a finite number >= 0, got {epsilon!r}.")
        self.epsilon = epsilon
        self.mean = None
        self.std = None

    def fit(self, data):
        """Computes the statistics along axis 0 of `data`; returns self."""
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
        """(data - mean) / std, in the dtype of `data` if it is floating."""
        data = self._check_fitted(data, "transform")
        out = (data - self.mean) / self.std
        return out.astype(data.dtype) if np.issubdtype(data.dtype, np.floating) else out

    def inverse_transform(self, data):
        """data * std + mean: back to the original units."""
        data = self._check_fitted(data, "inverse_transform")
        out = data * self.std + self.mean
        return out.astype(data.dtype) if np.issubdtype(data.dtype, np.floating) else out

    def fit_transform(self, data):
        """`fit(data)` then `transform(data)`."""
        return self.fit(data).transform(data)

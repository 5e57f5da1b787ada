"""UCI regression benchmarks: the data, the split, the normalisation.

The protocol of Hernandez-Lobato and Adams (2015): random 90/10 train/test
splits, inputs and targets standardised with training-split statistics only,
test RMSE and log-likelihood in the target's original units. This module
holds each step; `zoo.cli` strings them together.

Every data file is read by the same strict rules (`text_lines`,
`parse_number`): a regular UTF-8 file no larger than a quarter of physical
memory, plain ASCII decimal numbers, each finite and within float32's range
(about 3.4e38), since models train in float32.
"""

import array
import errno
import os
import pathlib
import re
import stat
from importlib import resources

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn._memory import memory_bytes

CONCRETE_NUM_FEATURES = 8
# Models train in float32: a larger magnitude would turn into inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# A number as a data file writes it: sign, digits with an optional decimal
# point (or a leading one), exponent. ASCII only: Python's float() also takes
# "1_0", full-width digits, "nan" and "infinity", none of which a data file
# means as a number.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# Fields are separated by ASCII whitespace only: a no-break or full-width
# space inside a field makes it fail as a number instead of splitting it.
ASCII_SPACE = " \t\r\n\f\v"
_SEPARATOR = re.compile(r"[ \t\r\n\f\v]+")
_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_OPEN_ERRORS = {errno.ENOENT: "no such file", errno.EISDIR: "is a directory, not a file",
                errno.EACCES: "permission denied", errno.ENOTDIR: "a parent is not a directory",
                errno.ELOOP: "too many levels of symbolic links"}


def shown(field: str, limit: int = 40) -> str:
    """repr of a field for an error message, cut to `limit` characters."""
    return repr(field if len(field) <= limit else field[:limit - 3] + "...")


def max_file_bytes():
    """Largest file the loaders read: a quarter of physical memory.

    Parsed rows need about as many bytes as their text; the limit leaves
    room for the copies that standardisation and training make.
    """
    return memory_bytes() // 4


def check_regular_file(path) -> os.stat_result:
    """Stats `path` and refuses anything but a regular file of bounded size.

    Runs before the file is opened: opening a FIFO blocks until a writer
    appears, i.e. forever. Symbolic links to regular files are followed.

    Raises:
        ValueError: naming the file, for a missing path, a directory, FIFO,
            device or socket, or a file above `max_file_bytes()`.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as error:
        reason = _OPEN_ERRORS.get(error.errno, error.strerror)
        raise ValueError(f"{path}: cannot read the data file ({reason}).") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path}: cannot read the data file (is a directory, not a file).")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)),
                    "not a regular file")
        raise ValueError(f"{path}: cannot read the data file (is {kind}, not a regular file).")
    limit = max_file_bytes()
    if info.st_size > limit:
        raise ValueError(f"{path}: the file has {info.st_size} bytes, more than the "
                         f"{limit} (a quarter of physical memory) a data file may have.")
    return info


def text_lines(path):
    """Yields (1-based line number, line) of a regular UTF-8 text file.

    A UTF-8 byte-order mark at the start is dropped; lines end in LF or CRLF.

    Raises:
        ValueError: naming the file for a path that `check_regular_file`
            refuses or that cannot be opened, and the line for bytes that
            are not UTF-8 text or a carriage return inside a line.
    """
    path = os.fspath(path)
    check_regular_file(path)
    # O_NONBLOCK: should the path be swapped for a FIFO after the check, the
    # open returns at once and the fstat below refuses it.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        reason = _OPEN_ERRORS.get(error.errno, error.strerror)
        raise ValueError(f"{path}: cannot read the data file ({reason}).") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{path}: cannot read the data file (not a regular file).")
    with os.fdopen(descriptor, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}, line {line_number}: not UTF-8 text (a binary or "
                                 "corrupted file?).") from None
            if "\r" in line.rstrip("\r\n"):
                raise ValueError(f"{path}, line {line_number}: a carriage return inside the "
                                 "line (old Mac line endings?); lines must end in LF or CRLF.")
            yield line_number, line


def is_number(field: str) -> bool:
    """Whether `field` is a number as `parse_number` reads it (finite or not)."""
    return bool(_NUMBER.fullmatch(field))


def parse_number(field: str, where: str) -> float:
    """One number of a data file as a float; `where` (file, line...) starts any error.

    Accepts ASCII decimal notation: `-2`, `.5`, `+3.`, `1e-3`, `1E+05`.

    Raises:
        ValueError: for anything else (`1_0`, full-width digits, `0x1A`,
            `1,5`), NaN or inf, and a magnitude above float32's maximum.
    """
    if not _NUMBER.fullmatch(field):
        if _NON_FINITE.fullmatch(field):
            raise ValueError(f"{where}: {shown(field)} is not a finite number.")
        raise ValueError(f"{where}: {shown(field)} is not a number.")
    value = float(field)
    if not abs(value) <= FLOAT32_MAX:
        raise ValueError(f"{where}: {shown(field)} is beyond float32's range (magnitude at "
                         f"most {FLOAT32_MAX:.4g}).")
    return value


def read_table_lines(path, num_columns=None):
    """`read_table`, plus the 1-based line number of each row (an int64 array)."""
    path = os.fspath(path)
    num_columns = check.integer("num_columns", num_columns, allow_none=True)
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
            (|value| > 3.4e38), or bytes that are not text; naming the file
            for a missing, non-regular (FIFO, device, directory), oversized
            or unreadable file or one without any row.

    Example:
    >>> table = read_table(tfp_bnn.data.concrete_path(), num_columns=9)
    >>> table.shape
    (1030, 9)
    """
    return read_table_lines(path, num_columns)[0]


def first_beyond_float32(values):
    """Index tuple of the first entry of `values` that is NaN or beyond float32's range."""
    bad = ~(np.abs(values) <= FLOAT32_MAX)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None


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

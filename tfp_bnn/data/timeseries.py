"""Univariate time series for forecasting: reading, windowing, chronological splits.

A forecaster sees `window` past values and predicts the next one. Test
windows are those whose target lies in the final period of the series,
so the model is scored on the future, never on months interleaved with
its training data; the scaling statistics come from the training targets
alone. `load_sunspots` reads the packaged Zurich monthly sunspot numbers
(1749-1983, see data/sunspots/README.md).
"""

import csv
import os
import pathlib
import re
from importlib import resources

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data._text_files import ASCII_SPACE
from tfp_bnn.data._text_files import first_beyond_float32
from tfp_bnn.data._text_files import is_number
from tfp_bnn.data._text_files import parse_number
from tfp_bnn.data._text_files import text_lines
from tfp_bnn.data.uci import Standardizer

# A time label that orders the rows: an ISO 8601 date (year, month, day,
# time of day) without a time zone, or a plain number (a time step).
_ISO_DATE = re.compile(r"[0-9]{4}(?:-[0-9]{2}(?:-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}"
                       r"(?::[0-9]{2}(?:\.[0-9]+)?)?)?)?)?")


def _times(labels):
    """The labels as sortable times (datetime64 or float), or None if they are neither."""
    if all(_ISO_DATE.fullmatch(label) for label in labels):
        try:
            return np.array([np.datetime64(label.replace(" ", "T")) for label in labels])
        except ValueError:  # "2020-13": the shape of a date, not a date
            return None
    if all(is_number(label) for label in labels):
        return np.array([float(label) for label in labels])
    return None


def _in_time_order(path, labels, values, line_numbers):
    """Rows sorted by their time labels; a time given twice is a ValueError naming both lines."""
    times = _times(labels)
    if times is None:
        return labels, values
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if same.size:
        first, second = sorted((int(order[same[0]]), int(order[same[0] + 1])))
        raise ValueError(f"{path}, lines {line_numbers[first]} and {line_numbers[second]}: "
                         f"the time {labels[second]!r} appears twice; a series has one value "
                         "per time step.")
    return [labels[i] for i in order], values[order]


def read_series_csv(path, value_column: int = 1) -> tuple:
    r"""Reads a CSV of one (label, value) row per time step, in time order.

    A first row whose value column is a number is data (a file without a
    header); any other first row is the header. When every label is an ISO
    8601 date (`1749`, `1749-01`, `2020-01-31`, `2020-01-31T12:00`) or a
    plain number, the rows are sorted by it: a newest-first or shuffled file
    gives the same series as a sorted one. Other labels (say `Jan 1749`)
    leave the rows in file order.

    Args:
        path: the file (str or path-like).
        value_column: 0-based column of the numbers (default 1); column 0
            is taken as the time label. Values are read by
            `tfp_bnn.data.uci.parse_number`: ASCII decimal notation (`-2`,
            `.5`, `1E+05`), finite and at most float32's maximum (about
            3.4e38) in magnitude, since models train in float32.

    Returns:
        `(labels, values)`: a list of str and a float64 array, in time
        order (see above).

    Raises:
        ValueError: naming the file and the 1-based line for a row that is
            too short, a value that is not such a number, bytes that are
            not text, or a time that appears twice; naming the file for a
            missing, non-regular (FIFO, device, directory), oversized or
            unreadable file or one with no data row.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "series.csv")
    >>> with open(path, "w") as stream:
    ...     _ = stream.write("month,value\n2020-01,3.5\n2020-02,4\n")
    >>> read_series_csv(path)
    (['2020-01', '2020-02'], array([3.5, 4. ]))
    """
    path = os.fspath(path)
    value_column = check.integer("value_column", value_column)
    labels, values, line_numbers = [], [], []
    rows = csv.reader(line for _, line in text_lines(path))
    first = True
    try:
        for row in rows:
            # csv counts physical lines: a quoted field may span several.
            line_number = rows.line_num
            if not row or all(not field.strip(ASCII_SPACE) for field in row):
                continue
            if first:
                first = False
                if not (len(row) > value_column
                        and is_number(row[value_column].strip(ASCII_SPACE))):
                    continue  # the header
            where = f"{path}, line {line_number}"
            if len(row) <= value_column:
                raise ValueError(f"{where}: expected at least {value_column + 1} columns, "
                                 f"found {len(row)}.")
            values.append(parse_number(row[value_column].strip(ASCII_SPACE), where))
            labels.append(row[0].strip(ASCII_SPACE))
            line_numbers.append(line_number)
    except csv.Error as error:
        raise ValueError(f"{path}, line {rows.line_num}: not valid CSV ({error}).") from None
    if not values:
        raise ValueError(f"{path}: the file holds no data rows.")
    return _in_time_order(path, labels, np.asarray(values, dtype=np.float64), line_numbers)


def sunspots_path() -> pathlib.Path:
    """Path of the packaged monthly sunspot table.

    Returns:
        A `pathlib.Path` to `monthly-sunspots.csv` (header, then "YYYY-MM",
        value rows), read by `load_sunspots`.

    Example:
    >>> sunspots_path().name
    'monthly-sunspots.csv'
    """
    return pathlib.Path(resources.files("tfp_bnn.data") / "sunspots" / "monthly-sunspots.csv")


def load_sunspots() -> tuple:
    """Zurich monthly sunspot numbers, 1749-01 to 1983-12 (2820 months).

    Returns:
        `(months, values)`: labels "YYYY-MM" and a float64 array [2820].

    Example:
    >>> months, values = load_sunspots()
    >>> months[0], months[-1], values.shape
    ('1749-01', '1983-12', (2820,))
    """
    return read_series_csv(sunspots_path())


def make_windows(series, window: int) -> tuple:
    """All (window past values -> next value) pairs of a 1-D series.

    Args:
        series: 1-D array of n finite values in time order.
        window: past values per input, an int with 1 <= window < n.

    Returns:
        `(x, y)`: x [n - window, window], y [n - window], where row t holds
        series[t : t + window] and its target series[t + window].

    Example:
    >>> x, y = make_windows(np.arange(5.0), window=3)
    >>> x
    array([[0., 1., 2.],
           [1., 2., 3.]])
    >>> y
    array([3., 4.])
    """
    series = check.vector("series", series)
    window = check.integer("window", window)
    if len(series) <= window:
        raise ValueError(f"`series` has {len(series)} values; a window of {window} needs "
                         f"at least {window + 1}.")
    x = np.lib.stride_tricks.sliding_window_view(series[:-1], window)
    return x.copy(), series[window:].copy()


def forecasting_split(series, window: int, test_size: int, validation_size: int = 0,
                      dtype="float32") -> dict:
    """Chronological train / validation / test windows, scaled by training statistics.

    The last `test_size` targets are the test period, the `validation_size`
    before them the validation period, and every earlier target is for
    training. Inputs of a test window reach back into earlier periods, as a
    forecaster's would, but no training window sees a value of a later
    period. One `Standardizer` fitted on the training targets scales inputs
    and targets alike (they are the same quantity).

    Args:
        series: 1-D array of values in time order.
        window: past values per input, int >= 1.
        test_size: number of final targets held out, int >= 1.
        validation_size: number of targets before the test period held out
            for validation, int >= 0.
        dtype: dtype of the returned arrays.

    Returns:
        dict with `x_train`, `y_train`, `x_validation`, `y_validation`,
        `x_test`, `y_test` (x as [n, window, 1], scaled; y as [n], scaled)
        and `scaler`, the fitted `Standardizer` (its `inverse_transform`
        maps predictions back to the series' units).

    Example:
    >>> months, values = load_sunspots()
    >>> split = forecasting_split(values, window=12, test_size=120, validation_size=60)
    >>> split["x_train"].shape, split["x_validation"].shape, split["x_test"].shape
    ((2628, 12, 1), (60, 12, 1), (120, 12, 1))
    """
    test_size = check.integer("test_size", test_size)
    validation_size = check.integer("validation_size", validation_size, minimum=0)
    x, y = make_windows(series, window)
    num_train = len(y) - test_size - validation_size
    if num_train < 2:
        raise ValueError(f"{len(y)} windows leave {num_train} for training after "
                         f"test_size={test_size} and validation_size={validation_size}; "
                         "need at least 2.")
    scaler = Standardizer().fit(y[:num_train])
    # Every value of the series is an input or a target: refuse the split if
    # the training statistics send one past float32's range (a nearly flat
    # training period, then a value far away), as the model would see inf.
    series = np.asarray(series, dtype=np.float64)
    with np.errstate(all="ignore"):
        scaled = scaler.transform(series)
    position = first_beyond_float32(scaled)
    if position is not None:
        index = position[0]
        raise ValueError(f"`series` value {series[index]:.6g} at index {index} scales to "
                         f"{scaled[index]:.3g} with the training targets' mean "
                         f"{float(scaler.mean):.3g} and std {float(scaler.std):.3g}, beyond "
                         "float32's range; the series' spread is too extreme to train on.")
    x = scaler.transform(x)[..., None].astype(dtype)
    y = scaler.transform(y).astype(dtype)
    cut = num_train + validation_size
    return {"x_train": x[:num_train], "y_train": y[:num_train],
            "x_validation": x[num_train:cut], "y_validation": y[num_train:cut],
            "x_test": x[cut:], "y_test": y[cut:], "scaler": scaler}

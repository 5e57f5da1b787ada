"""Tests of tfp_bnn.data.timeseries: the packaged sunspots, windows and the split."""

import pathlib

import numpy as np
import pytest

from tfp_bnn.data import forecasting_split
from tfp_bnn.data import load_sunspots
from tfp_bnn.data import make_windows
from tfp_bnn.data import read_series_csv

SHARED = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "timeseries"


def test_packaged_sunspots_match_the_shared_copy_and_their_known_ends():
    months, values = load_sunspots()
    assert len(months) == len(values) == 2820
    assert (months[0], months[-1]) == ("1749-01", "1983-12")
    assert values[:3].tolist() == [58.0, 62.6, 70.0]
    assert values[-1] == 33.4
    assert np.all(values >= 0)
    shared = SHARED / "monthly-sunspots.csv"
    if shared.exists():
        _, reference = read_series_csv(shared)
        np.testing.assert_array_equal(values, reference)


def test_windows_hold_the_past_values_and_the_next_one():
    series = np.arange(10.0)
    x, y = make_windows(series, 3)
    assert x.shape == (7, 3) and y.shape == (7,)
    np.testing.assert_array_equal(x[0], [0, 1, 2])
    np.testing.assert_array_equal(x[-1], [6, 7, 8])
    np.testing.assert_array_equal(y, np.arange(3.0, 10.0))


def test_split_is_chronological_and_scaled_by_training_targets_only():
    series = np.concatenate([np.arange(100.0), 1000.0 + np.arange(20.0)])
    split = forecasting_split(series, window=4, test_size=10, validation_size=6)
    assert len(split["y_test"]) == 10 and len(split["y_validation"]) == 6
    assert len(split["y_train"]) == len(series) - 4 - 16
    scaler = split["scaler"]
    train_targets = series[4:4 + len(split["y_train"])]
    assert scaler.mean[()] == pytest.approx(train_targets.mean())
    assert scaler.std[()] == pytest.approx(train_targets.std())
    # Back in the series' units the test targets are the final values.
    np.testing.assert_allclose(scaler.inverse_transform(split["y_test"]), series[-10:],
                               rtol=1e-5)
    assert split["x_test"].shape == (10, 4, 1) and split["x_test"].dtype == np.float32
    # The last test window's inputs are the four values before the last target.
    np.testing.assert_allclose(scaler.inverse_transform(split["x_test"][-1, :, 0]),
                               series[-5:-1], rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({"window": 0, "test_size": 5}, "window"),
    ({"window": 3, "test_size": 0}, "test_size"),
    ({"window": 3, "test_size": 5, "validation_size": -1}, "validation_size"),
    ({"window": 3, "test_size": 16}, "training"),
    ({"window": 30, "test_size": 1}, "window of 30"),
])
def test_bad_split_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        forecasting_split(np.arange(20.0), **kwargs)


def _series_file(tmp_path, rows, header="month,value"):
    path = tmp_path / "series.csv"
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + rows))
    return path


MONTHS = [f"2020-{month:02d}" for month in range(1, 13)]


@pytest.mark.parametrize("order", ["sorted", "newest_first", "shuffled"])
def test_series_rows_come_back_in_date_order(tmp_path, order):
    rows = [f"{month},{index}" for index, month in enumerate(MONTHS)]
    if order == "newest_first":
        rows = rows[::-1]
    elif order == "shuffled":
        rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    labels, values = read_series_csv(_series_file(tmp_path, rows))
    assert labels == MONTHS
    np.testing.assert_array_equal(values, np.arange(12.0))


def test_numbered_time_steps_are_sorted_as_numbers(tmp_path):
    labels, values = read_series_csv(_series_file(tmp_path, ["10,3", "9,2", "1,1"], "t,x"))
    assert labels == ["1", "9", "10"]
    np.testing.assert_array_equal(values, [1.0, 2.0, 3.0])


def test_labels_that_are_not_times_keep_the_file_order(tmp_path):
    labels, _ = read_series_csv(_series_file(tmp_path, ["Mar 2020,1", "Jan 2020,2"]))
    assert labels == ["Mar 2020", "Jan 2020"]


def test_a_date_given_twice_is_refused_naming_both_lines(tmp_path):
    path = _series_file(tmp_path, ["2020-01,1", "2020-03,2", "2020-02,3", "2020-03,4"])
    with pytest.raises(ValueError, match=r"series.csv, lines 3 and 5: the time '2020-03' "
                                         r"appears twice"):
        read_series_csv(path)


def test_a_headerless_file_keeps_its_first_row(tmp_path):
    rows = [f"{month},{index}" for index, month in enumerate(MONTHS)]
    labels, values = read_series_csv(_series_file(tmp_path, rows, header=None))
    assert labels == MONTHS and len(values) == 12 and values[0] == 0.0


def test_a_bad_value_is_reported_at_its_physical_line(tmp_path):
    path = _series_file(tmp_path, ['"2020-01",1', '"2020-02",x'], header='"month","value"')
    with pytest.raises(ValueError, match="series.csv, line 3: 'x' is not a number"):
        read_series_csv(path)

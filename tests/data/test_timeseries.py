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

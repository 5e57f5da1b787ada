"""Tests of IsotonicCalibration: the fitted maps against scikit-learn's IsotonicRegression,
the layer against the NumPy transform, calibration gained, saving."""

import keras
import numpy as np
import pytest
from scipy import special
from sklearn.isotonic import IsotonicRegression

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import overconfident
from tests.calibration.calibration_cases import run_keras_layer_test
from tfp_bnn.calibration import IsotonicCalibration
from tfp_bnn.calibration.isotonic_calibration import pool_adjacent_violators
from tfp_bnn.metrics import expected_calibration_error


def test_pool_adjacent_violators_is_scikit_learns_isotonic_fit():
    rng = np.random.default_rng(0)
    x = np.round(rng.uniform(size=300), 2)  # ties pooled first
    y = (rng.uniform(size=300) < x ** 2).astype(float)
    distinct, fitted = pool_adjacent_violators(x, y)
    reference = IsotonicRegression(out_of_bounds="clip").fit(x, y)
    np.testing.assert_allclose(fitted, reference.predict(distinct), atol=1e-12)
    assert np.all(np.diff(fitted) >= 0)


def test_each_class_table_is_the_isotonic_fit_on_the_grid():
    logits, labels = overconfident(rows=500, classes=3)
    layer = IsotonicCalibration(num_knots=51).fit(logits[0], labels)
    probs = special.softmax(logits[0], axis=-1)
    grid = np.linspace(0, 1, 51)
    table = keras.ops.convert_to_numpy(layer.table)
    for k in range(3):
        reference = IsotonicRegression(out_of_bounds="clip", y_min=None).fit(
            probs[:, k], (labels == k).astype(float))
        np.testing.assert_allclose(table[k], reference.predict(grid), atol=1e-6)


@pytest.mark.jax
def test_the_layer_computes_the_numpy_transform():
    logits, labels = overconfident(rows=300, classes=4)
    layer = IsotonicCalibration().fit(logits[0], labels)
    z = logits[0].astype("float32")
    out = special.softmax(keras.ops.convert_to_numpy(layer(z)).astype(np.float64), axis=-1)
    np.testing.assert_allclose(out, layer.transform(z), atol=2e-5)


def test_calibration_error_drops_on_held_out_rows():
    logits, labels = overconfident(rows=4000, classes=4, seed=5)
    fit_rows, test_rows = slice(0, 2000), slice(2000, None)
    layer = IsotonicCalibration().fit(logits[0, fit_rows], labels[fit_rows])
    before = special.softmax(logits[0, test_rows], axis=-1)
    after = layer.transform(logits[0, test_rows])
    assert expected_calibration_error(labels[test_rows], after) < 0.5 * \
        expected_calibration_error(labels[test_rows], before)
    np.testing.assert_allclose(after.sum(-1), 1.0, rtol=1e-12)


@pytest.mark.jax
def test_keras_run_layer_test_and_saving(tmp_path):
    run_keras_layer_test(IsotonicCalibration, {"num_knots": 11}, 3, 1)
    logits, labels = overconfident(rows=200, classes=4)
    model = keras.Sequential([keras.Input((4,)), IsotonicCalibration(from_logits=True)
                              .fit(logits[0], labels)])
    z = logits[0].astype("float32")
    assert_saved_model_computes_the_same(model, z, tmp_path / "m.keras")


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="num_knots"):
        IsotonicCalibration(num_knots=1)
    with pytest.raises(ValueError, match="`labels` must lie in"):
        IsotonicCalibration().fit(np.zeros((4, 3)), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="built for 3"):
        IsotonicCalibration().fit(np.eye(3), [0, 1, 2]).fit(np.zeros((2, 4)), [0, 1])


def test_a_table_too_large_for_memory_is_refused_when_built():
    with pytest.raises(ValueError, match=r"IsotonicCalibration's table of 10 classes x "
                                         r"10000000000 points would need"):
        IsotonicCalibration(num_knots=10**10).build((None, 10))

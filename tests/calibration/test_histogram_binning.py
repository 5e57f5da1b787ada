"""Tests of HistogramBinning: the bin frequencies against a plain loop, the layer against
the NumPy transform, calibration gained, saving."""

import keras
import numpy as np
import pytest
from scipy import special

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import overconfident
from tests.calibration.calibration_cases import run_keras_layer_test
from tfp_bnn.calibration import HistogramBinning
from tfp_bnn.metrics import expected_calibration_error


def test_each_bin_holds_the_frequency_of_its_class():
    logits, labels = overconfident(rows=400, classes=3)
    layer = HistogramBinning(num_bins=10).fit(logits[0], labels)
    probs = special.softmax(logits[0], axis=-1)
    table = keras.ops.convert_to_numpy(layer.table)
    for k in range(3):
        for b in range(10):
            low, high = b / 10, (b + 1) / 10
            inside = [i for i in range(400)
                      if low <= probs[i, k] < high or (b == 9 and probs[i, k] == 1.0)]
            expected = (np.mean([labels[i] == k for i in inside]) if inside
                        else (b + 0.5) / 10)
            assert table[k, b] == pytest.approx(expected, abs=1e-6)


@pytest.mark.jax
def test_the_layer_computes_the_numpy_transform():
    logits, labels = overconfident(rows=300, classes=4)
    layer = HistogramBinning(num_bins=8).fit(logits[0], labels)
    z = logits[0].astype("float32")
    out = special.softmax(keras.ops.convert_to_numpy(layer(z)).astype(np.float64), axis=-1)
    # float32 probabilities near an inner bin edge may fall on its other side: compare the
    # rows with no probability within float32 rounding of one (0 and 1 are clipped).
    probs = special.softmax(logits[0], axis=-1)
    edge = np.round(probs * 8)
    near = (np.abs(probs * 8 - edge) < 1e-4) & (edge > 0) & (edge < 8)
    clear = ~np.any(near, axis=-1)
    assert clear.sum() > 290
    np.testing.assert_allclose(out[clear], layer.transform(z)[clear], atol=2e-5)


def test_calibration_error_drops_on_held_out_rows():
    logits, labels = overconfident(rows=4000, classes=4, seed=6)
    layer = HistogramBinning().fit(logits[0, :2000], labels[:2000])
    before = special.softmax(logits[0, 2000:], axis=-1)
    after = layer.transform(logits[0, 2000:])
    assert expected_calibration_error(labels[2000:], after) < 0.5 * \
        expected_calibration_error(labels[2000:], before)


@pytest.mark.jax
def test_keras_run_layer_test_and_saving(tmp_path):
    run_keras_layer_test(HistogramBinning, {"num_bins": 5}, 3, 1)
    logits, labels = overconfident(rows=200, classes=4)
    probs = special.softmax(logits[0], axis=-1).astype("float32")
    layer = HistogramBinning(num_bins=6, from_logits=False, name="bins").fit(probs, labels)
    model = keras.Sequential([keras.Input((4,)), layer])
    loaded = assert_saved_model_computes_the_same(model, probs, tmp_path / "m.keras")
    assert loaded.get_layer("bins").num_bins == 6


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="num_bins"):
        HistogramBinning(num_bins=0)
    with pytest.raises(ValueError, match="from_logits=False"):
        HistogramBinning(from_logits=False).fit(np.full((4, 3), 2.0), [0, 1, 2, 0])

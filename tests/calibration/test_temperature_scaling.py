"""Tests of TemperatureScaling: the NLL minimum against SciPy, the layer's map, saving."""

import keras
import numpy as np
import pytest
from scipy import optimize
from scipy import special

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import overconfident
from tests.calibration.calibration_cases import run_keras_layer_test
from tests.calibration.calibration_cases import reference_nll
from tfp_bnn.calibration import TemperatureScaling


@pytest.mark.parametrize("samples", [1, 8])
def test_the_fitted_temperature_is_the_nll_minimum_scipy_finds(samples):
    logits, labels = overconfident(samples=samples)
    layer = TemperatureScaling().fit(logits if samples > 1 else logits[0], labels)
    found = optimize.minimize_scalar(lambda log_t: reference_nll(logits / np.exp(log_t), labels),
                                     bounds=(-3.0, 5.0), method="bounded",
                                     options={"xatol": 1e-10})
    assert layer.fit_result["converged"]
    assert layer.fit_result["nll_after"] == pytest.approx(found.fun, abs=1e-10)
    # float32 weight: T to float32's precision.
    assert layer.temperature == pytest.approx(np.exp(found.x), rel=1e-5)
    assert layer.temperature > 1.5  # sharpened 4x: cooled
    assert layer.fit_result["nll_before"] == pytest.approx(reference_nll(logits, labels),
                                                           rel=1e-12)


def test_probabilities_are_scaled_through_their_logs():
    logits, labels = overconfident()
    probs = special.softmax(logits[0], axis=-1)
    from_probs = TemperatureScaling(from_logits=False).fit(probs, labels)
    from_logits = TemperatureScaling().fit(logits[0], labels)
    assert from_probs.temperature == pytest.approx(from_logits.temperature, rel=1e-6)
    out = keras.ops.convert_to_numpy(from_probs(probs.astype("float32")))
    expected = np.log(probs) / from_probs.temperature
    np.testing.assert_allclose(special.softmax(out, -1), special.softmax(expected, -1),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.jax
def test_the_layer_divides_logits_and_keeps_the_predicted_class():
    logits, labels = overconfident(rows=50)
    layer = TemperatureScaling().fit(logits[0], labels)
    z = logits[0].astype("float32")
    out = keras.ops.convert_to_numpy(layer(z))
    np.testing.assert_allclose(out, z / layer.temperature, rtol=1e-6)
    assert np.array_equal(out.argmax(-1), z.argmax(-1))


@pytest.mark.jax
def test_keras_run_layer_test():
    run_keras_layer_test(TemperatureScaling, {}, 3, 1)


@pytest.mark.jax
def test_a_saved_model_keeps_the_temperature(tmp_path):
    logits, labels = overconfident(rows=80)
    layer = TemperatureScaling(name="cal").fit(logits[0], labels)
    model = keras.Sequential([keras.Input((4,)), layer])
    z = logits[0].astype("float32")
    loaded = assert_saved_model_computes_the_same(model, z, tmp_path / "m.keras")
    assert loaded.get_layer("cal").temperature == layer.temperature


@pytest.mark.parametrize("kwargs, message", [
    ({"logits": np.zeros((5,)), "labels": np.zeros(5)}, "`logits`"),
    ({"logits": np.zeros((5, 1)), "labels": np.zeros(5)}, "K >= 2"),
    ({"logits": np.full((5, 3), np.nan), "labels": np.zeros(5)}, "`logits` has NaN"),
    ({"logits": np.zeros((5, 3)), "labels": np.zeros(4)}, "`labels` must be \\[5\\]"),
    ({"logits": np.zeros((5, 3)), "labels": np.full(5, 3)}, "`labels` must lie in \\[0, 3\\)"),
    ({"logits": np.zeros((5, 3)), "labels": np.full(5, 0.5)}, "integer class ids"),
    ({"logits": np.zeros((5, 3)), "labels": np.zeros(5), "max_iterations": 0},
     "max_iterations"),
])
def test_bad_fit_arguments_name_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TemperatureScaling().fit(**kwargs)


def test_probabilities_that_are_not_are_refused_and_a_bad_flag_too():
    with pytest.raises(ValueError, match="from_logits=False"):
        TemperatureScaling(from_logits=False).fit(np.full((5, 3), 0.5), np.zeros(5))
    with pytest.raises(ValueError, match="from_logits"):
        TemperatureScaling(from_logits="yes")
    layer = TemperatureScaling().fit(np.eye(3)[[0, 1, 2, 0]], [0, 1, 2, 1])
    with pytest.raises(ValueError, match="built for 3"):
        layer.fit(np.zeros((4, 5)), [0, 1, 2, 3])

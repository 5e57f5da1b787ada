"""Tests of VectorScaling: the NLL minimum against SciPy's, the layer's map, saving."""

import keras
import numpy as np
import pytest

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import overconfident
from tests.calibration.calibration_cases import run_keras_layer_test
from tests.calibration.calibration_cases import reference_nll
from tests.calibration.calibration_cases import scipy_minimum
from tfp_bnn.calibration import VectorScaling


@pytest.mark.parametrize("samples", [1, 6])
def test_the_fit_reaches_the_nll_minimum_scipy_finds(samples):
    logits, labels = overconfident(samples=samples, classes=4)

    def nll(theta):
        return reference_nll(logits * theta[:4] + theta[4:], labels)
    theta, value = scipy_minimum(nll, np.r_[np.ones(4), np.zeros(4)])
    layer = VectorScaling().fit(logits, labels)
    assert layer.fit_result["converged"]
    # The NLL is convex for S = 1 (a linear model of the logits): one minimum; the bias is
    # defined up to a common shift (softmax ignores it), so compare the NLL and the map.
    assert layer.fit_result["nll_after"] == pytest.approx(value, abs=1e-8)
    assert layer.fit_result["nll_after"] <= value + 1e-12
    z = logits[0]
    ours = z * np.asarray(layer.scale) + np.asarray(layer.bias)
    theirs = z * theta[:4] + theta[4:]
    np.testing.assert_allclose(ours - ours.mean(-1, keepdims=True),
                               theirs - theirs.mean(-1, keepdims=True), atol=2e-3)


@pytest.mark.jax
def test_the_layer_scales_and_shifts_each_class():
    logits, labels = overconfident(rows=60)
    layer = VectorScaling().fit(logits[0], labels)
    z = logits[0].astype("float32")
    expected = z * keras.ops.convert_to_numpy(layer.scale) + keras.ops.convert_to_numpy(
        layer.bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(z)), expected, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.jax
def test_keras_run_layer_test():
    run_keras_layer_test(VectorScaling, {}, 3, 2)


@pytest.mark.jax
def test_a_saved_model_keeps_the_map(tmp_path):
    logits, labels = overconfident(rows=80)
    model = keras.Sequential([keras.Input((4,)), VectorScaling().fit(logits[0], labels)])
    z = logits[0].astype("float32")
    assert_saved_model_computes_the_same(model, z, tmp_path / "m.keras")


def test_one_class_is_refused_when_built():
    with pytest.raises(ValueError, match="classes >= 2"):
        VectorScaling().build((None, 1))

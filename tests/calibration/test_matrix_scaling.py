"""Tests of MatrixScaling: the NLL minimum (plain and with the ODIR penalty) against SciPy's,
the layer's map, saving."""

import keras
import numpy as np
import pytest

from tests.calibration.calibration_cases import assert_saved_model_computes_the_same
from tests.calibration.calibration_cases import overconfident
from tests.calibration.calibration_cases import run_keras_layer_test
from tests.calibration.calibration_cases import reference_nll
from tests.calibration.calibration_cases import scipy_minimum
from tfp_bnn.calibration import MatrixScaling

K = 3


def _objective(logits, labels, l2):
    def value(theta):
        kernel, bias = theta[:K * K].reshape(K, K), theta[K * K:]
        off = kernel - np.diag(np.diag(kernel))
        penalty = l2 / (K * (K - 1)) * (np.sum(off ** 2) + np.sum(bias ** 2))
        return reference_nll(logits @ kernel + bias, labels) + penalty
    return value


@pytest.mark.parametrize("l2", [0.0, 2.0])
def test_the_fit_reaches_the_penalised_nll_minimum_scipy_finds(l2):
    logits, labels = overconfident(classes=K, samples=1, rows=500)
    theta, value = scipy_minimum(_objective(logits, labels, l2),
                                 np.r_[np.eye(K).ravel(), np.zeros(K)])
    layer = MatrixScaling(l2=l2).fit(logits[0], labels)
    assert layer.fit_result["converged"]
    assert layer.fit_result["nll_after"] == pytest.approx(value, abs=1e-8)
    assert layer.fit_result["nll_after"] <= value + 1e-12
    if l2 > 0:  # strictly convex with the penalty: the parameters are unique
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.kernel),
                                   theta[:K * K].reshape(K, K), atol=2e-3)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.bias), theta[K * K:],
                                   atol=2e-3)


def test_the_penalty_pulls_the_kernel_towards_diagonal():
    logits, labels = overconfident(classes=K, rows=300)
    plain = MatrixScaling().fit(logits[0], labels)
    shrunk = MatrixScaling(l2=1e4).fit(logits[0], labels)

    def off(layer):
        kernel = keras.ops.convert_to_numpy(layer.kernel)
        return np.abs(kernel - np.diag(np.diag(kernel))).max()
    assert off(shrunk) < 0.05 * off(plain)


@pytest.mark.jax
def test_the_layer_multiplies_by_its_kernel():
    logits, labels = overconfident(rows=60, classes=K)
    layer = MatrixScaling().fit(logits[0], labels)
    z = logits[0].astype("float32")
    expected = z @ keras.ops.convert_to_numpy(layer.kernel) + keras.ops.convert_to_numpy(
        layer.bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(z)), expected, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.jax
def test_keras_run_layer_test():
    run_keras_layer_test(MatrixScaling, {"l2": 0.5}, 3, 2)


@pytest.mark.jax
def test_a_saved_model_keeps_the_map_and_the_penalty(tmp_path):
    logits, labels = overconfident(rows=80, classes=K)
    model = keras.Sequential([keras.Input((K,)),
                              MatrixScaling(l2=0.5, name="cal").fit(logits[0], labels)])
    z = logits[0].astype("float32")
    loaded = assert_saved_model_computes_the_same(model, z, tmp_path / "m.keras")
    assert loaded.get_layer("cal").l2 == 0.5


def test_a_negative_penalty_is_refused():
    with pytest.raises(ValueError, match="`l2`"):
        MatrixScaling(l2=-1.0)


def test_a_fit_too_large_for_memory_is_refused_before_it_starts():
    # 40,000 classes: a 40,000^2 kernel and its L-BFGS history, hundreds of GiB.
    logits = np.zeros((2, 40_000), np.float32)
    with pytest.raises(ValueError, match="MatrixScaling's fit on logits of shape "
                                         r"\(1, 2, 40000\) would need .* GiB"):
        MatrixScaling().fit(logits, [0, 1])

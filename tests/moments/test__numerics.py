"""tfp_bnn.moments._numerics: the operations whose form depends on the backend."""

import keras
import numpy as np
import pytest

from tfp_bnn.moments import _numerics

pytestmark = pytest.mark.jax


def test_wide_float_is_float64_where_the_backend_computes_in_it():
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415 - the JAX backend

        expected = "float64" if jax.config.jax_enable_x64 else "float32"
    else:
        expected = "float64"
    assert _numerics.wide_float() == expected


def test_sum_of_others_keeps_the_small_sums_next_to_a_saturated_entry():
    # A nearly saturated softmax row: the sum of the others next to the 1 is
    # ~1e-7, which total - own in float32 (ulp of 1: 1.2e-7) would round to
    # 0 or 1.2e-7. Both forms keep it to float32 rounding of itself.
    row = np.array([1.0 - 4e-7, 1e-7, 2e-7, 1e-7], "float32")
    values = np.stack([row, row[::-1].copy()])
    exact = values.astype("float64").sum(-1, keepdims=True) - values.astype("float64")
    result = np.asarray(_numerics.sum_of_others(keras.ops.convert_to_tensor(values)))
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, exact, rtol=1e-6)


def test_cholesky_factors_and_gives_nan_for_an_indefinite_matrix():
    spd = np.array([[[4.0, 2.0], [2.0, 3.0]]], "float32")
    np.testing.assert_allclose(np.asarray(_numerics.cholesky(spd)), np.linalg.cholesky(spd),
                               rtol=1e-6)
    indefinite = np.array([[[1.0, 2.0], [2.0, 1.0]]], "float32")
    # NaN, not an error, eagerly as in a compiled step: the likelihood reports it.
    assert np.isnan(np.asarray(_numerics.cholesky(indefinite))).any()


def test_erfc_keeps_the_small_tails():
    # erfc(5) = 1.5375e-12, erfc(9) = 4.1370e-37: 1 - erf(x) is 0 in float32 there.
    x = np.array([0.0, 1.0, 5.0, 9.0], "float32")
    expected = np.array([1.0, 0.157299207, 1.53745979e-12, 4.13703175e-37])
    np.testing.assert_allclose(np.asarray(_numerics.erfc(keras.ops.convert_to_tensor(x))),
                               expected, rtol=1e-5)

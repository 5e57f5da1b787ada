"""The random-feature GP's Cholesky algebra against NumPy, on the active backend.

Marked `jax`: on JAX these are `jax.scipy.linalg`'s kernels, on TensorFlow
`tf.linalg`'s (the layer tests check them through the layer in float64).
"""

import keras
import numpy as np
import pytest

from tfp_bnn.layers.gaussian_process import _linalg


def _numpy(value):
    return np.asarray(keras.ops.convert_to_numpy(value))


@pytest.mark.jax
def test_factor_solves_and_gram_against_numpy():
    # float32 on a matrix with cond ~ 10: rtol 1e-5.
    rng = np.random.default_rng(0)
    features = rng.normal(size=(6, 4)).astype("float32")
    matrix = np.eye(4, dtype="float32") + features.T @ features / 6
    rhs = rng.normal(size=(4, 3)).astype("float32")
    lower = _numpy(_linalg.cholesky(keras.ops.convert_to_tensor(matrix)))
    np.testing.assert_allclose(lower, np.linalg.cholesky(matrix.astype(np.float64)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_numpy(_linalg.triangular_solve(lower, rhs)),
                               np.linalg.solve(lower, rhs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_numpy(_linalg.triangular_solve(lower, rhs, transpose=True)),
                               np.linalg.solve(lower.T, rhs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_numpy(_linalg.cholesky_solve(lower, rhs)),
                               np.linalg.solve(matrix, rhs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_numpy(_linalg.gram(features)), features.T @ features,
                               rtol=1e-5, atol=1e-6)
    assert tuple(_numpy(_linalg.noise_shape(4, 2 * 3))) == (4, 6)

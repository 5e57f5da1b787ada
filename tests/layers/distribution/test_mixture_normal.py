"""MixtureNormal: a Gaussian mixture as output; parity with tfp.layers, saving."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tests.layers.distribution.distribution_heads import regression_data
from tfp_bnn import layers


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("MixtureNormal", (3, (2,)))


def test_saved_and_loaded_with_safe_mode(tmp_path):
    x, y = regression_data(64)
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(layers.MixtureNormal.params_size(2, 1)),
                              layers.MixtureNormal(2, 1, convert_to_tensor_fn="mean")])
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded(x[:5]), model(x[:5]), rtol=1e-6)
    np.testing.assert_allclose(loaded(x[:5]).log_prob(y[:5, None]),
                               model(x[:5]).log_prob(y[:5, None]), rtol=1e-6)
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(model.evaluate(x, y, verbose=0))

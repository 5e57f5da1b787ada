"""MixtureNormal: a Gaussian mixture as output; parity with tfp.layers, saving."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tests.layers.distribution.distribution_heads import check_log_prob_by_hand
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tests.layers.distribution.distribution_heads import regression_data
from tfp_bnn import layers
from tfp_bnn._substrate import tfd


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


@pytest.mark.jax
def test_log_prob_of_the_substrates_distribution():
    params = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")  # 2 x (1 + 2)
    y = np.random.default_rng(2).normal(size=(4, 1)).astype("float32")
    components = params[:, 2:].reshape(4, 2, 2)   # per component: location, scale
    expected = tfd.MixtureSameFamily(
        tfd.Categorical(logits=params[:, :2]),
        tfd.Independent(tfd.Normal(components[..., :1],
                                   keras.ops.softplus(components[..., 1:])), 1))
    check_log_prob_by_hand(layers.MixtureNormal(2, 1), (2, 1), params, expected, y)

"""DistributionLambda, the base of the output layers: arguments, saving, the value it returns."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
from tests.layers.distribution_heads import normal_model
from tests.layers.distribution_heads import regression_data
from tfp_bnn import layers
from tfp_bnn.distributions import distribution_of

tfd = tfp.distributions


def test_bad_convert_to_tensor_fn_and_seed():
    with pytest.raises(ValueError, match="convert_to_tensor_fn"):
        layers.IndependentNormal(1, convert_to_tensor_fn="median")
    with pytest.raises(ValueError, match="seed"):
        layers.IndependentNormal(1, seed=-3)
    with pytest.raises(ValueError, match="no mean"):
        layers.Categorical(3, convert_to_tensor_fn="mean")
    with pytest.raises(ValueError, match="make_distribution_fn"):
        layers.DistributionLambda()


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def laplace_head(t):
    return tfd.Laplace(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:]))


def test_distribution_lambda_with_registered_function_saves(tmp_path):
    model = normal_model(layers.DistributionLambda(laplace_head, convert_to_tensor_fn="mode"))
    x, y = regression_data(64)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    model.fit(x, y, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(distribution_of(loaded(x[:3])), tfd.Laplace)
    np.testing.assert_allclose(loaded(x[:3]), model(x[:3]), rtol=1e-6)


def test_output_of_a_later_operation_is_refused():
    value = layers.IndependentNormal(1)(np.zeros((3, 2), "float32"))
    with pytest.raises(ValueError, match="carries no distribution"):
        distribution_of(value + 1.0)
    with pytest.raises(ValueError, match="carries no distribution"):
        tfp_bnn.losses.NegativeLogLikelihood()(np.zeros((3, 1)), np.zeros((3, 1), "float32"))

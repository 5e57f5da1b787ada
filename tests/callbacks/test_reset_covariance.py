"""ResetCovariance: the GP layers' precision holds the last epoch only."""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import ResetCovariance
from tfp_bnn.layers import RandomFeatureGaussianProcess

RIDGE = 0.5


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 3))
    return x, x[:, :1] - x[:, 1:2]


def _nested_model():
    """The GP layer inside an inner model inside the outer one; features = the inputs.

    No L2 penalty: a float64 regularization loss cannot join Keras's float32 loss sum
    (as for `keras.layers.Dense(dtype="float64", kernel_regularizer=...)`).
    """
    gp = RandomFeatureGaussianProcess(1, num_inducing=16, ridge_penalty=RIDGE,
                                      l2_regularization=0.0, seed=0, dtype="float64")
    inner = keras.Sequential([keras.Input((3,), dtype="float64"), gp])
    inputs = keras.Input((3,), dtype="float64")
    model = keras.Model(inputs, inner(inputs))
    model.compile("sgd", "mse")
    return model, gp


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no_reset"])
def test_precision_holds_the_last_epoch_only(reset):
    x, y = _data()
    model, gp = _nested_model()
    callbacks = [ResetCovariance()] if reset else []
    model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=callbacks)
    # The features do not train: exact sums (of the float32 inputs fit feeds).
    phi = gp.random_features(x.astype("float32")).numpy()
    epochs = 1 if reset else 3
    np.testing.assert_allclose(gp.precision.numpy(),
                               RIDGE * np.eye(16) + epochs * phi.T @ phi, rtol=1e-10)


def test_refuses_a_model_without_gp_layer_and_round_trips_its_config():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = _data()
    with pytest.raises(ValueError, match="no tfp_bnn.layers.RandomFeatureGaussianProcess"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[ResetCovariance()])
    assert keras.saving.get_registered_name(ResetCovariance) == "tfp_bnn>ResetCovariance"
    clone = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(ResetCovariance()))
    assert isinstance(clone, ResetCovariance)

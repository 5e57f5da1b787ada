"""Tests of zoo.models.calibrated: the temperature CNN trains on the training digits but a
held-out cut and fits its temperature on that cut's logits."""

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import special

import tfp_bnn
from tfp_bnn.data.digits import stratified_split
from zoo.models import calibrated

SMALL = {"filters": (4, 8), "hidden_units": (16,)}


@pytest.fixture(scope="module")
def trained():
    data = tfp_bnn.data.load_digits(seed=0)
    small = {key: values[:200] for key, values in data.items()}
    return small, calibrated.temperature_cnn(small, epochs=3, batch_size=32, seed=1, **SMALL)


def test_the_network_trains_on_the_rest_and_the_temperature_on_the_held_out_cut(trained):
    data, result = trained
    fit, held_out = stratified_split(data["y_train"], test_fraction=0.2, seed=1)
    assert result.details["calibration_rows"] == len(held_out)
    assert isinstance(result.model.layers[-1], tfp_bnn.calibration.TemperatureScaling)
    # The CNN (the History's model) took 3 epochs of steps over the fit rows only.
    assert int(result.history.model.optimizer.iterations) == 3 * math.ceil(len(fit) / 32)
    # The temperature minimises the NLL of the held-out logits (SciPy, apart).
    logits = np.asarray(tfp_bnn.predict.sample(
        result.history.model, data["x_train"][held_out], num_samples=1))[0]
    labels = data["y_train"][held_out]

    def nll(log_t):
        return -np.mean(special.log_softmax(logits / np.exp(log_t), axis=1)[
            np.arange(len(labels)), labels])
    found = optimize.minimize_scalar(nll, bounds=(-4, 4), method="bounded",
                                     options={"xatol": 1e-9})
    assert result.details["temperature"] == pytest.approx(math.exp(found.x), rel=1e-4)


def test_a_missing_key_is_named():
    with pytest.raises(ValueError, match="y_train"):
        calibrated.temperature_cnn({"x_train": np.zeros((4, 8, 8, 1))})

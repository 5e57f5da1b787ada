"""Tests of zoo.models.cheap_ensembles: the BatchEnsemble and Packed CNNs (their members'
structure, the mixture tfp_bnn.predict scores) and the SWAG trainer."""

import keras
import numpy as np
import pytest
from scipy import special

import tfp_bnn
from zoo.models import cheap_ensembles
from zoo.models import digits as digits_models

SMALL = {"filters": (4, 8), "hidden_units": (16,)}


@pytest.fixture(scope="module")
def small_data():
    data = tfp_bnn.data.load_digits(seed=0)
    return {key: values[:96] for key, values in data.items()}


@pytest.mark.parametrize("builder", [cheap_ensembles.batch_ensemble_cnn,
                                     cheap_ensembles.packed_cnn])
def test_a_cheap_ensemble_cnn_trains_its_members_and_predicts_their_mixture(builder,
                                                                          small_data):
    model = builder(**digits_models.DIGITS, seed=0, num_members=4, **SMALL)
    x, y = small_data["x_train"], small_data["y_train"]
    before = model.evaluate(x, y, verbose=0)
    digits_models.train(model, small_data, epochs=3, batch_size=32, seed=0)
    assert model.evaluate(x, y, verbose=0) < before
    logits = keras.ops.convert_to_numpy(model(x[:10]))
    assert logits.shape == (10, 4, 10)
    assert not np.allclose(logits[:, 0], logits[:, 1])  # members differ
    prediction = tfp_bnn.predict.classification(model, x[:10], num_samples=4)
    np.testing.assert_allclose(prediction.probs, special.softmax(logits, -1).mean(axis=1),
                               rtol=1e-4, atol=1e-6)


def test_the_same_seed_builds_the_same_network():
    first = cheap_ensembles.packed_cnn(**digits_models.DIGITS, seed=5, **SMALL)
    second = cheap_ensembles.packed_cnn(**digits_models.DIGITS, seed=5, **SMALL)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_swag_collects_over_the_second_half_and_predicts_its_draws(small_data):
    trained = cheap_ensembles.swag_cnn(small_data, epochs=6, seed=0, members=4, **SMALL)
    assert trained.details == {"snapshots": 3, "members": 4}  # epochs 3, 4, 5 (0-based)
    prediction = tfp_bnn.predict.classification(trained.model, small_data["x_test"],
                                                num_samples=4)
    assert prediction.probs.shape == (len(small_data["x_test"]), 10)
    assert np.all(prediction.mutual_information >= -1e-9)
    assert prediction.mutual_information.max() > 0  # the draws disagree somewhere


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_members"):
        cheap_ensembles.batch_ensemble_cnn(**digits_models.DIGITS, num_members=1)
    with pytest.raises(ValueError, match="classifiers"):
        cheap_ensembles.packed_cnn((8, 8, 1), task="regression")
    with pytest.raises(ValueError, match="x_train"):
        cheap_ensembles.swag_cnn({})

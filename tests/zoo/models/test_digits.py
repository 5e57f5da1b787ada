"""Tests of zoo.models.digits: the baseline digits classifiers and `train`."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from zoo.models import digits as digits_models
from zoo.models.digits import DIGITS
from zoo.models.flipout import flipout_mlp


def _tiny_data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return {"x_train": rng.uniform(size=(n, 8, 8, 1)).astype(np.float32),
            "y_train": rng.integers(0, 10, size=n).astype(np.int32)}


def _layers(model, kinds):
    return [layer for layer in model.layers if isinstance(layer, kinds)]


# The covariate-shift comparison runs the deterministic baselines against Flipout and node-BNN
# networks of the same shapes.
@pytest.mark.parametrize("builder", [digits_models.deterministic_mlp, flipout_mlp])
def test_mlp_sizes(builder):
    model = builder(**DIGITS, num_train=100)
    dense = _layers(model, (keras.layers.Dense, DenseFlipout))
    assert [layer.units for layer in dense] == [128, 128, 10]
    assert [layer.activation.__name__ for layer in dense] == ["relu", "relu", "linear"]
    assert model.input_shape == (None, 8, 8, 1) and model.output_shape == (None, 10)
    assert isinstance(model.layers[1], keras.layers.Flatten)


@pytest.mark.parametrize("builder", [digits_models.deterministic_cnn, digits_models.flipout_cnn])
def test_cnn_sizes(builder):
    model = builder(**DIGITS, num_train=100)
    convs = _layers(model, (keras.layers.Conv2D, Conv2DFlipout))
    dense = _layers(model, (keras.layers.Dense, DenseFlipout))
    assert [layer.filters for layer in convs] == [16, 32]
    assert all(tuple(layer.kernel_size) == (3, 3) for layer in convs)
    assert [layer.units for layer in dense] == [64, 10]
    pool = _layers(model, keras.layers.MaxPooling2D)
    assert len(pool) == 1 and pool[0].output.shape == (None, 4, 4, 16)
    assert _layers(model, keras.layers.Flatten)[0].output.shape == (None, 4 * 4 * 32)
    assert model.output_shape == (None, 10)


@pytest.mark.parametrize("name", ["deterministic_mlp", "deterministic_cnn", "flipout_cnn"])
def test_compiled_with_adam_and_logit_cross_entropy(name):
    model = getattr(digits_models, name)(**DIGITS, num_train=100, seed=2)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    assert isinstance(model.loss, keras.losses.SparseCategoricalCrossentropy)
    assert model.loss.get_config()["from_logits"] is True
    stochastic = tfp_bnn.bayesian_layers(model)
    if name.startswith("flipout"):
        assert len(stochastic) == 4
        assert all(isinstance(layer, (DenseFlipout, Conv2DFlipout)) for layer in stochastic)
        for layer in stochastic:
            assert float(layer.kl_weight.numpy()) == pytest.approx(1 / 100)
        # Distinct noise streams per layer.
        assert len({layer.seed for layer in stochastic}) == len(stochastic)
    else:
        assert stochastic == []


@pytest.mark.parametrize("builder", [digits_models.deterministic_cnn,
                                     digits_models.deterministic_mlp])
def test_same_seed_same_weights(builder):
    first, second, other = (builder(**DIGITS, seed=seed) for seed in (3, 3, 4))
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(first.get_weights(), other.get_weights()))


@pytest.mark.parametrize(
    "builder, kwargs, name",
    [(digits_models.flipout_cnn, {"num_train": None}, "num_train"),
     (digits_models.deterministic_mlp, {"num_train": 0}, "num_train"),
     (digits_models.deterministic_mlp, {"hidden_units": (0,)}, "hidden_units"),
     (digits_models.flipout_cnn, {"filters": (4, -1)}, "filters"),
     (digits_models.deterministic_cnn, {"filters": ()}, "filters"),
     (digits_models.deterministic_cnn, {"hidden_units": (2.0,)}, "hidden_units"),
     (digits_models.deterministic_cnn, {"input_shape": (8, 8)}, "input_shape"),
     (digits_models.flipout_cnn, {"learning_rate": 0.0}, "learning_rate"),
     (digits_models.deterministic_mlp, {"seed": -1}, "seed")],
)
def test_builders_validate_arguments(builder, kwargs, name):
    with pytest.raises(ValueError, match=name):
        builder(**{**DIGITS, "num_train": 10, **kwargs})


def test_train_sets_kl_weight_to_one_over_n_for_variational_models():
    data = _tiny_data()
    # Built for another N: only train's KLScheduler can make it 1/N.
    model = flipout_mlp(**DIGITS, num_train=1000, hidden_units=(8,))
    history = digits_models.train(model, data, epochs=1, batch_size=32, seed=0)
    assert history.history["kl_weight"] == [pytest.approx(1 / 64)]
    assert "kl" in history.history
    for layer in tfp_bnn.bayesian_layers(model):
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / 64)


def test_train_deterministic_model_without_kl_scheduler():
    model = digits_models.deterministic_mlp(**DIGITS, hidden_units=(8,))
    history = digits_models.train(model, _tiny_data(), epochs=2, batch_size=32, seed=0)
    assert len(history.history["loss"]) == 2
    assert "kl" not in history.history and "kl_weight" not in history.history


def test_train_is_seeded():
    losses = []
    for _ in range(2):
        model = digits_models.deterministic_mlp(**DIGITS, hidden_units=(8,), seed=1)
        history = digits_models.train(model, _tiny_data(), epochs=2, batch_size=16, seed=5)
        losses.append(history.history["loss"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)


def test_train_validates_arguments():
    model = digits_models.deterministic_mlp(**DIGITS, hidden_units=(8,))
    with pytest.raises(ValueError, match="epochs"):
        digits_models.train(model, _tiny_data(), epochs=0)
    with pytest.raises(ValueError, match="'y_train'"):
        digits_models.train(model, {"x_train": np.zeros((2, 8, 8, 1))}, epochs=1)


def test_build_and_train_is_build_then_train():
    data = _tiny_data()
    trainer = digits_models.BuildAndTrain(digits_models.deterministic_mlp, hidden_units=(8,))
    trained = trainer(data, epochs=2, batch_size=16, seed=5)
    assert isinstance(trained, digits_models.Trained) and trained.details == {}
    assert len(trained.history.history["loss"]) == 2
    assert [layer.units for layer in _layers(trained.model, keras.layers.Dense)] == [8, 10]
    # The seed goes to the builder and to `train`: the same network as doing both by hand.
    model = digits_models.deterministic_mlp(**DIGITS, num_train=64, hidden_units=(8,), seed=5)
    digits_models.train(model, data, epochs=2, batch_size=16, seed=5)
    for mine, theirs in zip(trained.model.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    assert repr(trainer) == "BuildAndTrain(deterministic_mlp)"


def test_build_and_train_gives_the_builder_the_digits_and_n():
    calls = []

    def builder(**kwargs):
        calls.append(kwargs)
        return digits_models.deterministic_mlp(**{**kwargs, "hidden_units": (4,)})

    digits_models.BuildAndTrain(builder, learning_rate=0.01)(_tiny_data(n=40), epochs=1,
                                                             batch_size=40, seed=7)
    assert calls == [{**DIGITS, "num_train": 40, "seed": 7, "learning_rate": 0.01}]


def test_build_and_train_refuses_bad_arguments():
    with pytest.raises(TypeError, match="`builder` must be a callable"):
        digits_models.BuildAndTrain("deterministic_cnn")
    with pytest.raises(ValueError, match="'x_train'"):
        digits_models.BuildAndTrain(digits_models.deterministic_cnn)({"y_train": []}, epochs=1)

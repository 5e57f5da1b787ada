"""Tests of zoo.models.lstm: the Bayesian LSTM forecaster.

One model is trained once (module fixture) on a tiny noisy sine task and
shared by the training, prediction and saving checks.
"""

import keras
import numpy as np
import pytest

import tfp_bnn
import zoo
from zoo.models import limits
from zoo.models import lstm
from zoo.models.transformer import INITIAL_LOG_NOISE
from zoo.run import scoring

N = 64
WINDOW = 6


def _data(n=N, window=WINDOW, seed=0):
    """Windows of sin(phase + 0.6 t) -> its next value plus noise of s.d. 0.05."""
    rng = np.random.default_rng(seed)
    series = np.sin(rng.uniform(0, 2 * np.pi, size=(n, 1)) + 0.6 * np.arange(window + 1))
    x = series[:, :window, None].astype("float32")
    y = (series[:, window] + 0.05 * rng.normal(size=n)).astype("float32")
    return x, y


@pytest.fixture(scope="module")
def trained():
    """A forecaster (8 units) fitted 8 epochs of 4 batches by the zoo's `scoring.fit`."""
    x, y = _data()
    model = lstm.bayesian_lstm_forecaster((WINDOW, 1), num_train=N, units=8,
                                          learning_rate=1e-2, seed=0)
    history, _ = scoring.fit(model, x, y, epochs=8, batch_size=16, seed=0)
    return model, history.history, x


def test_builds_through_the_registry():
    model = zoo.build_model("bayesian_lstm_forecaster", (24, 1), num_train=100, units=4)
    assert model.name == "bayesian_lstm_forecaster"
    assert model.input_shape == (None, 24, 1) and model.output_shape == (None, 2)
    rnn = model.get_layer("lstm")
    assert isinstance(rnn.cell, tfp_bnn.layers.LSTMCellReparameterization)
    assert rnn.cell.units == 4
    assert float(rnn.cell.kl_weight.numpy()) == pytest.approx(1 / 100)
    # The learned noise starts where the transformer forecaster's does.
    assert model.get_layer("noise").weights[0].numpy().tolist() == [INITIAL_LOG_NOISE]
    assert not zoo.get_spec("bayesian_lstm_forecaster").sampling_free


@pytest.mark.parametrize("kwargs, name", [
    ({"input_shape": (24,)}, "input_shape"),
    ({"input_shape": (24, 1, 1)}, "input_shape"),
    ({"input_shape": (0, 1)}, "input_shape"),
    ({"units": 0}, "units"),
    ({"units": 2.5}, "units"),
    ({"units": limits.MAX_UNITS + 1}, "units"),
    ({"num_train": None}, "num_train"),
    ({"seed": -1}, "seed"),
    ({"learning_rate": -1.0}, "learning_rate"),
    ({"task": "classification", "num_classes": 3}, "regression"),
])
def test_bad_arguments_are_named(kwargs, name):
    arguments = {"input_shape": (24, 1), "num_train": 10, **kwargs}
    with pytest.raises(ValueError, match=name):
        lstm.bayesian_lstm_forecaster(**arguments)


def test_parameter_limit_is_checked_before_building():
    # 2 features and 4000 units: 4 * 4000 * 4003 = 6.4e7 weights > 5e7.
    with pytest.raises(ValueError, match="units.*weights"):
        lstm.bayesian_lstm_forecaster((24, 2), num_train=10, units=4000)


def test_kl_enters_once_per_pass_whatever_the_window():
    # The same seed gives the same weights for any window (the kernels do not
    # depend on it). One training pass over 2 and over 12 steps must add the
    # same two KL terms (the cell's and the head's, closed form: no sampling
    # noise), and the cell's seed generator must advance equally: its weights
    # are drawn once per pass, not once per step.
    x, _ = _data(4, window=12)
    results = []
    for window in (2, 12):
        model = lstm.bayesian_lstm_forecaster((window, 1), num_train=N, units=3, seed=5)
        cell = model.get_layer("lstm").cell
        before = cell.seed_generator.state.numpy().copy()
        model(x[:, :window], training=True)
        advance = tuple(cell.seed_generator.state.numpy() - before)
        results.append(([float(loss) for loss in model.losses], advance))
        expected = [float(layer.kl_weight * layer.kl_divergence())
                    for layer in (cell, model.get_layer("mean"))]
        np.testing.assert_allclose(sorted(results[-1][0]), sorted(expected), rtol=1e-6)
    (short, advance_short), (long, advance_long) = results
    assert len(short) == len(long) == 2
    np.testing.assert_allclose(long, short, rtol=1e-6)
    assert advance_short == advance_long and any(advance_short)


def test_fit_lowers_the_data_loss(trained):
    _, history, _ = trained
    # `data_loss` is the Gaussian NLL without KL / N (KLScheduler's log). Measured:
    # 1.00 after the first epoch, 0.35 after the eighth with this seed.
    data = history["data_loss"]
    assert np.all(np.isfinite(history["loss"]))
    assert data[-1] < 0.6 * data[0], data
    np.testing.assert_allclose(np.subtract(history["loss"], history["kl"]), data, rtol=1e-5)


def test_monte_carlo_prediction(trained):
    model, _, x = trained
    prediction = tfp_bnn.predict.regression(model, x[:8], num_samples=6)
    assert prediction.mean.shape == (8, 1)
    assert np.all(np.isfinite(prediction.mean))
    # Different weights per sample: the epistemic part is positive for every window.
    assert np.all(prediction.epistemic_variance > 0)
    noise = np.exp(model.get_layer("noise").weights[0].numpy())
    np.testing.assert_allclose(prediction.aleatoric_variance, np.full((8, 1), noise), rtol=1e-5)


def test_keras_file_round_trip_with_safe_mode(trained, tmp_path):
    model, _, x = trained
    path = tmp_path / "lstm.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    tfp_bnn.set_mean_mode(model, True)
    tfp_bnn.set_mean_mode(loaded, True)
    try:
        np.testing.assert_array_equal(loaded(x[:8]).numpy(), model(x[:8]).numpy())
    finally:
        tfp_bnn.set_mean_mode(model, False)
    # The loaded model samples again when asked to.
    tfp_bnn.set_mean_mode(loaded, False)
    assert not np.allclose(loaded(x[:8]).numpy(), loaded(x[:8]).numpy())

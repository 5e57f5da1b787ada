"""KLScheduler inside a compiled fit: the weight changes, the history shows the KL."""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import BlundellSchedule
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.callbacks import LinearWarmup
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization

pytestmark = pytest.mark.jax

N = 64


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 3)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")


def _model(jit_compile=False):
    model = keras.Sequential([
        keras.Input((3,)), DenseReparameterization(8, activation="relu", seed=0),
        DenseFlipout(1, seed=1),
    ])
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=jit_compile)
    return model


class _Recorder(keras.callbacks.Callback):
    """Reads each layer's KL weight and loss contribution as the compiled step saw it."""

    def __init__(self):
        super().__init__()
        self.weights = []

    def on_train_batch_end(self, batch, logs=None):
        self.weights.append([float(layer.kl_weight.numpy()) for layer in self.model.layers])


@pytest.mark.parametrize("jit_compile", [False, True])
def test_weight_changes_inside_compiled_fit(jit_compile):
    x, y = _data()
    model = _model(jit_compile)
    recorder = _Recorder()
    schedule = KLScheduler(N, schedule=LinearWarmup(epochs=2))
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0,
                        callbacks=[schedule, recorder])
    expected = [min(1.0, s / 8) / N for s in range(12)]
    for got, want in zip(recorder.weights, expected):
        assert got == pytest.approx([want, want], rel=1e-6)
    # The compiled step used the assigned weights: in epoch 0 they average
    # (0+1+2+3)/8/4 = 0.1875/N, from epoch 2 on they are 1/N (a weight frozen
    # into the traced step would stay at its initial 1.0).
    kl = history.history["kl"]
    exact = sum(float(layer.kl_divergence()) for layer in model.layers)
    assert kl[2] == pytest.approx(exact / N, rel=0.05)
    assert kl[0] == pytest.approx(0.1875 * exact / N, rel=0.2)


def test_history_separates_kl_and_data_terms():
    x, y = _data()
    model = _model()
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, validation_split=0.25,
                        callbacks=[KLScheduler(48)])
    h = history.history
    for prefix in ("", "val_"):
        for key in ("kl", "data_loss"):
            assert f"{prefix}{key}" in h
        np.testing.assert_allclose(
            np.array(h[f"{prefix}kl"]) + h[f"{prefix}data_loss"], h[f"{prefix}loss"], rtol=1e-5
        )
    assert h["kl_weight"] == [1 / 48, 1 / 48]
    assert not any(k.endswith("_kl") and k != "val_kl" for k in h)
    # The KL entry is the weighted KL of the posterior: compare at the end of
    # training with the exact value (it drifts within an epoch, so allow the
    # last epoch's change).
    exact = sum(float(layer.kl_divergence()) for layer in model.layers) / 48
    assert h["val_kl"][-1] == pytest.approx(exact, rel=1e-4)


def test_per_layer_entries_on_request():
    x, y = _data()
    model = _model()
    history = model.fit(x, y, epochs=1, verbose=0, callbacks=[KLScheduler(N, per_layer_kl=True)])
    names = [layer.name for layer in model.layers]
    per_layer = sum(history.history[f"{name}_kl"][0] for name in names)
    assert history.history["kl"][0] == pytest.approx(per_layer, rel=1e-6)


def test_blundell_schedule_sets_pi_i():
    x, y = _data()
    model = _model()
    recorder = _Recorder()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0,
              callbacks=[KLScheduler(N, schedule=BlundellSchedule()), recorder])
    m = 4
    pis = [2.0 ** (m - i) / (2.0**m - 1) for i in range(1, m + 1)]
    np.testing.assert_allclose([w[0] for w in recorder.weights], [m * p / N for p in pis],
                               rtol=1e-6)


def test_unset_kl_weight_warns_without_a_scheduler():
    x, y = _data()
    model = keras.Sequential([keras.Input((3,)), DenseFlipout(1)])
    model.compile("adam", "mse")
    with pytest.warns(UserWarning, match="kl_weight"):
        model.fit(x, y, epochs=1, verbose=0)


def test_scheduler_rejects_bad_arguments_and_models():
    with pytest.raises(ValueError, match="`num_examples`"):
        KLScheduler(0)
    with pytest.raises(ValueError, match="`schedule`"):
        KLScheduler(10, schedule="sigmoid")
    x, y = _data()
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    plain.compile("adam", "mse")
    with pytest.raises(ValueError, match="no tfp_bnn variational layer"):
        plain.fit(x, y, epochs=1, verbose=0, callbacks=[KLScheduler(N)])

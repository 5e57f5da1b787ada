"""`evaluate` with a KLScheduler: the callbacks' logs gain `kl` and `data_loss`,
what `evaluate` returns does not.

The `on_test_end` logs of the callbacks after the scheduler carry the KL
entries as `fit` does; the list and the dict `evaluate` returns are those of
the same model built from `keras.layers.Dense`, so
`loss, mae = model.evaluate(...)` unpacks. No Keras method is patched.
"""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization

pytestmark = pytest.mark.jax

N = 40


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N, 3)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")


def _model(metrics=(), bayesian=True):
    if bayesian:
        layers = [DenseReparameterization(6, activation="relu", kl_weight=1 / N, seed=0),
                  DenseFlipout(1, kl_weight=1 / N, seed=1)]
    else:
        layers = [keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)]
    model = keras.Sequential([keras.Input((3,)), *layers])
    model.compile("adam", "mse", metrics=list(metrics))
    return model


class _TestEndLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = None

    def on_test_end(self, logs=None):
        self.logs = dict(logs)


def _exact_kl(model):
    """kl_weight * KL summed over the layers: the terms their `add_loss` adds."""
    return sum(float(layer.kl_weight.numpy()) * float(layer.kl_divergence())
               for layer in model.layers)


@pytest.mark.parametrize("metrics", [(), ("mae",), ("mae", "mse")],
                         ids=["loss_only", "mae", "mae_mse"])
def test_return_value_is_that_of_a_plain_model_and_later_callbacks_see_kl(data, metrics):
    x, y = data
    plain = _model(metrics, bayesian=False).evaluate(x, y, verbose=0)
    model = _model(metrics)
    before, after = _TestEndLogs(), _TestEndLogs()
    values = model.evaluate(x, y, batch_size=16, verbose=0,
                            callbacks=[before, KLScheduler(N), after])
    assert np.shape(values) == np.shape(plain)
    assert isinstance(values, float) == isinstance(plain, float)
    names = ["loss", *metrics]
    # The list holds the values of this very evaluation, in Keras's order.
    np.testing.assert_allclose(np.atleast_1d(values), [after.logs[k] for k in names])
    # Keras hands the callbacks one copy of its logs, in order: the scheduler
    # writes into it, so the callbacks after it see the KL entries.
    assert sorted(before.logs) == sorted(names)
    logs = after.logs
    assert sorted(logs) == sorted([*names, "kl", "data_loss"])
    assert logs["kl"] + logs["data_loss"] == pytest.approx(logs["loss"], rel=1e-6)
    assert logs["kl"] == pytest.approx(_exact_kl(model), rel=1e-5)


def test_loss_and_mae_unpack(data):
    x, y = data
    model = _model(("mae",))
    loss, mae = model.evaluate(x, y, verbose=0, callbacks=[KLScheduler(N)])
    assert np.isfinite(loss) and mae > 0.0
    only_loss = _model().evaluate(x, y, verbose=0, callbacks=[KLScheduler(N)])
    assert isinstance(only_loss, float)


def test_return_dict_is_keras_own_and_the_logged_kl_is_the_loss_term(data):
    x, y = data
    model = _model(("mae",))
    recorder = _TestEndLogs()
    returned = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True,
                              callbacks=[KLScheduler(N), recorder])
    assert sorted(returned) == ["loss", "mae"]
    assert returned["loss"] == recorder.logs["loss"]
    logs = recorder.logs
    # The KL terms the layers add to the loss (input-independent).
    model(x[:2])
    entering = sum(float(term) for term in model.losses)
    assert logs["kl"] == pytest.approx(entering, rel=1e-5)
    assert logs["kl"] == pytest.approx(_exact_kl(model), rel=1e-5)
    assert logs["data_loss"] == pytest.approx(logs["loss"] - logs["kl"], rel=1e-6)


def test_per_layer_entries_in_the_logs_not_in_the_return_value(data):
    x, y = data
    model = _model(("mae",))
    recorder = _TestEndLogs()
    scheduler = KLScheduler(N, per_layer_kl=True)
    returned = model.evaluate(x, y, verbose=0, return_dict=True,
                              callbacks=[scheduler, recorder])
    assert sorted(returned) == ["loss", "mae"]
    logs = recorder.logs
    names = [layer.name for layer in model.layers]
    assert sum(logs[f"{name}_kl"] for name in names) == pytest.approx(logs["kl"], rel=1e-6)
    assert len(model.evaluate(x, y, verbose=0, callbacks=[scheduler])) == 2


def test_nothing_outlives_an_evaluation(data):
    x, y = data
    model = _model(("mae",))
    model.evaluate(x, y, verbose=0)
    before = set(vars(model))  # what Keras's own evaluate leaves on the model
    model.evaluate(x, y, verbose=0, return_dict=True, callbacks=[KLScheduler(N)])
    assert set(vars(model)) == before
    assert len(model.train_on_batch(x, y)) == 2
    assert len(model.test_on_batch(x, y)) == 2
    assert sorted(model.evaluate(x, y, verbose=0, return_dict=True)) == ["loss", "mae"]


def test_fit_validation_then_evaluate(data):
    x, y = data
    model = _model(("mae",))
    scheduler = KLScheduler(30)
    history = model.fit(x, y, batch_size=10, epochs=1, verbose=0, validation_split=0.25,
                        callbacks=[scheduler]).history
    assert {"kl", "data_loss", "val_kl", "val_data_loss"} <= set(history)
    assert not any(key.startswith("val_val") for key in history)
    recorder = _TestEndLogs()
    loss, _ = model.evaluate(x, y, verbose=0, callbacks=[scheduler, recorder])
    assert recorder.logs["loss"] == loss
    assert recorder.logs["kl"] == pytest.approx(_exact_kl(model), rel=1e-5)

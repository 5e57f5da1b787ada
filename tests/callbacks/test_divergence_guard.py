"""DivergenceGuard: stop at the first non-finite loss, keep the last good state."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.callbacks import AtomicBackupAndRestore
from tfp_bnn.callbacks import DivergenceGuard
from tfp_bnn.callbacks import TrainingDiverged
from tfp_bnn.layers import DenseFlipout

NUM = 64
BATCH = 16  # 4 batches per epoch


class NanFromStep(keras.losses.Loss):
    """MSE that turns NaN once the optimizer has made `step` updates."""

    def __init__(self, iterations, step):
        super().__init__(name="nan_from_step")
        self.iterations = iterations
        self.step = step

    def call(self, y_true, y_pred):
        mse = tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)
        return tf.where(self.iterations >= self.step, tf.fill(tf.shape(mse), np.nan), mse)


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(NUM, 3)).astype("float32")
    return x, x[:, :1] - x[:, 1:2]


def _model(nan_step):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), DenseFlipout(4, seed=1, kl_weight=1 / NUM),
                              DenseFlipout(1, seed=2, kl_weight=1 / NUM)])
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer, NanFromStep(optimizer.iterations, nan_step))
    return model


class Weights(keras.callbacks.Callback):
    """Records the weights at every epoch end."""

    def __init__(self):
        super().__init__()
        self.at = {}

    def on_epoch_end(self, epoch, logs=None):
        self.at[epoch + 1] = [np.array(w) for w in self.model.get_weights()]


def test_stops_in_the_batch_that_diverged_and_restores_the_last_epoch_end(tmp_path):
    x, y = _data()
    model = _model(nan_step=9)  # the 10th update: epoch 3, batch 2
    weights = Weights()
    backup = AtomicBackupAndRestore(tmp_path / "backup", delete_checkpoint=False)
    with pytest.raises(TrainingDiverged, match=r"epoch 3, batch 2: loss is nan") as info:
        model.fit(x, y, batch_size=BATCH, epochs=6, shuffle=False, verbose=0,
                  callbacks=[weights, DivergenceGuard(), backup])
    error = info.value
    assert (error.epoch, error.batch, error.what, error.last_good_epoch) == (2, 1, "loss", 2)
    assert math.isnan(error.value) and isinstance(error, FloatingPointError)
    assert "after 2 epochs" in str(error)
    # The model holds the weights of the end of epoch 2, all finite.
    for now, good in zip(model.get_weights(), weights.at[2]):
        np.testing.assert_array_equal(now, good)
    # No epoch-end callback ran for the diverged epoch: the checkpoint is epoch 2's.
    assert sorted(weights.at) == [1, 2]
    state = json.loads((tmp_path / "backup" / "state.json").read_text())
    assert state["epoch"] == 2 and len(state["history"]["loss"]) == 2
    assert all(math.isfinite(v) for v in state["history"]["loss"])


def test_divergence_in_the_first_epoch_restores_the_initial_weights():
    x, y = _data()
    model = _model(nan_step=2)
    initial = [np.array(w) for w in model.get_weights()]
    with pytest.raises(TrainingDiverged, match="epoch 1, batch 3") as info:
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[DivergenceGuard()])
    assert info.value.last_good_epoch == 0
    for now, before in zip(model.get_weights(), initial):
        np.testing.assert_array_equal(now, before)


def test_without_restore_the_weights_stay_as_they_are():
    x, y = _data()
    model = _model(nan_step=5)
    with pytest.raises(TrainingDiverged) as info:
        model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0,
                  callbacks=[DivergenceGuard(restore=False)])
    assert info.value.last_good_epoch is None
    assert "last good" not in str(info.value)


def test_non_finite_weight_with_finite_loss_is_caught_at_the_epoch_end():
    x, y = _data()
    model = _model(nan_step=10**9)

    class Poison(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                kernel = self.model.layers[1].weights[0]
                kernel.assign(tf.fill(kernel.shape, np.inf))

    # The loss is not monitored here ("val_loss" never appears), so only the
    # epoch-end weight check can see it (the update after the poison made it nan).
    with pytest.raises(TrainingDiverged, match=r"epoch 1: weight .*kernel_loc is (nan|inf)"):
        model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0,
                  callbacks=[Poison(), DivergenceGuard(monitor="val_loss")])


def test_a_finite_run_is_untouched():
    x, y = _data()
    model = _model(nan_step=10**9)
    history = model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0,
                        callbacks=[DivergenceGuard()])
    assert len(history.history["loss"]) == 3
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("monitor", [(), [""], [3]])
def test_bad_monitor_is_named(monitor):
    with pytest.raises(ValueError, match="`monitor`"):
        DivergenceGuard(monitor=monitor)


def test_config_round_trip():
    guard = DivergenceGuard(monitor=["loss", "kl"], restore=False)
    again = DivergenceGuard(**guard.get_config())
    assert again.monitor == ("loss", "kl") and again.restore is False

"""Callback that stops `fit` at the first non-finite loss and keeps the last good weights."""

import math

import keras
import numpy as np


class TrainingDiverged(FloatingPointError):
    """Raised by `DivergenceGuard` when a training loss or weight is not finite.

    Attributes:
        epoch: 0-based epoch in which it happened.
        batch: 0-based batch within that epoch (None when found at the end of
            the epoch, in the weights).
        what: the log key or weight path that was not finite.
        value: its value (nan, inf or -inf).
        last_good_epoch: number of epochs completed in the weights the model
            holds now (the guard put them back), or None if it did not
            restore.
        summary: the first sentence of the message (where and what).

    Args:
        message: the full error message.
        epoch: the `epoch` attribute.
        batch: the `batch` attribute.
        what: the `what` attribute.
        value: the `value` attribute.
        last_good_epoch: the `last_good_epoch` attribute.
        summary: the `summary` attribute; None uses `message`.

    Example:
    >>> error = TrainingDiverged("Training diverged in epoch 2: loss is nan.", epoch=1,
    ...                          batch=None, what="loss", value=float("nan"),
    ...                          last_good_epoch=1)
    >>> isinstance(error, FloatingPointError), error.epoch, error.summary
    (True, 1, 'Training diverged in epoch 2: loss is nan.')
    """

    def __init__(self, message, epoch, batch, what, value, last_good_epoch, summary=None):
        super().__init__(message)
        self.summary = summary or message
        self.epoch = epoch
        self.batch = batch
        self.what = what
        self.value = value
        self.last_good_epoch = last_good_epoch


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DivergenceGuard(keras.callbacks.Callback):
    """Raises `TrainingDiverged` at the first non-finite loss, weights restored.

    Keras' `TerminateOnNaN` only sets `stop_training`; `fit` still runs the
    epoch-end callbacks, so a checkpoint callback would save the NaN weights
    over the last good checkpoint. This guard raises instead, from the batch
    that produced the non-finite loss, so nothing after it runs: checkpoints
    written at earlier epoch ends stay as they were. Before raising it puts
    back the weights of the last finite epoch end (or of the start of
    training), so the model in memory is the last good one and can be saved.

    At each epoch end it also checks every weight (a non-finite weight can
    come with a finite loss for one step); put it before checkpoint
    callbacks in the list so their epoch-end saves never see such weights.

    Args:
        monitor: a log key or a sequence of them, checked after every batch
            and at every epoch end (default: ("loss",)).
        restore: put the last good weights back before raising (default
            True).

    Example:
    >>> x = np.ones((8, 2), "float32")
    >>> y = np.full((8, 1), 1e20, "float32")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(1e10), "mse")
    >>> try:
    ...     model.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=[DivergenceGuard()])
    ... except TrainingDiverged as error:
    ...     print(error.summary, error.last_good_epoch)
    ...     model.save("last_good.keras")   # the weights before the first epoch
    Training diverged in epoch 1, batch ...: loss is inf. 0
    """

    def __init__(self, monitor=("loss",), restore=True):
        super().__init__()
        if isinstance(monitor, str):
            monitor = (monitor,)
        monitor = tuple(monitor)
        if not monitor or not all(isinstance(key, str) and key for key in monitor):
            raise ValueError(f"`monitor` must be log key names, got {monitor!r}.")
        self.monitor = monitor
        self.restore = bool(restore)
        self._epoch = 0
        self._good_weights = None
        self._good_epoch = None

    def get_config(self):
        return {"monitor": list(self.monitor), "restore": self.restore}

    def _remember(self, epoch, values=None):
        """Keeps `values` (default: a read of the model's weights) as the last good state."""
        if self.restore:
            self._good_weights = values if values is not None else self.model.get_weights()
            self._good_epoch = epoch

    def on_train_begin(self, logs=None):
        self._good_weights = None
        self._good_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if self._good_weights is None:
            # Taken here, not in on_train_begin: every callback's
            # on_train_begin has run by now, so a resumed run's restored
            # weights are the starting point, wherever the guard is listed.
            self._remember(epoch)

    def _fail(self, batch, what, value):
        where = f"epoch {self._epoch + 1}" + ("" if batch is None else f", batch {batch + 1}")
        restored = None
        if self.restore and self._good_weights is not None:
            self.model.set_weights(self._good_weights)
            restored = self._good_epoch
        summary = f"Training diverged in {where}: {what} is {value}."
        message = summary
        if restored is not None:
            message += (f" The model holds the last good weights again (after {restored} "
                        f"epoch{'' if restored == 1 else 's'}).")
        raise TrainingDiverged(message, self._epoch, batch, what, value, restored, summary)

    def _check_logs(self, batch, logs):
        for key in self.monitor:
            if logs and key in logs:
                value = float(logs[key])
                if not math.isfinite(value):
                    self._fail(batch, key, value)

    def on_train_batch_end(self, batch, logs=None):
        self._check_logs(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._check_logs(None, logs)
        # One read of the weights serves the check and the kept copy
        # (get_weights returns fresh arrays, in model.weights order).
        values = self.model.get_weights()
        for variable, value in zip(self.model.weights, values):
            if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                bad = value[~np.isfinite(value)].flat[0]
                self._fail(None, f"weight {variable.path}", float(bad))
        self._remember(epoch + 1, values)

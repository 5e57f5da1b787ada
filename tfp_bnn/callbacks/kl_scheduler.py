"""Callback that sets the KL weight of every variational layer during `fit`."""

import keras
from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn import _validation as check
from tfp_bnn.callbacks import kl_schedules
from tfp_bnn.modes import kl_layers


def consolidate_kl_logs(logs, layer_names, keep_per_layer=False):
    """Sums per-layer KL entries of `logs` into `kl` and adds `data_loss`.

    `<layer>_kl` is the batch-averaged kl_weight * KL that layer added to the
    loss (its `kl_tracker`, which `KLScheduler` writes into the logs). The
    sum is the model's KL term, and `loss - kl` is the data term, so both are
    visible in the history, for training entries and for their `val_`
    counterparts.

    Args:
        logs: a dict of log values, changed in place.
        layer_names: names of the variational layers whose `<name>_kl`
            (and `val_<name>_kl`) entries are summed; missing ones are skipped.
        keep_per_layer: keep the per-layer entries (default: remove them).

    Returns:
        `logs`, with `kl` and `data_loss` (and `val_kl`, `val_data_loss`)
        added when any per-layer entry was present.

    Example:
    >>> consolidate_kl_logs({"loss": 1.5, "dense_kl": 0.25, "out_kl": 0.25},
    ...                     ["dense", "out"])
    {'loss': 1.5, 'kl': 0.5, 'data_loss': 1.0}
    """
    for prefix in ("", "val_"):
        keys = [f"{prefix}{name}_kl" for name in layer_names]
        keys = [key for key in keys if key in logs]
        if not keys:
            continue
        values = [logs[key] if keep_per_layer else logs.pop(key) for key in keys]
        kl = float(sum(float(v) for v in values))
        logs[f"{prefix}kl"] = kl
        if f"{prefix}loss" in logs:
            logs[f"{prefix}data_loss"] = float(logs[f"{prefix}loss"]) - kl
    return logs


@keras.saving.register_keras_serializable(package="tfp_bnn")
class KLScheduler(keras.callbacks.Callback):
    """Sets kl_weight = schedule factor / N on every variational layer.

    The weights live in non-trainable variables, so the new value is read by
    the compiled training step (a Python float would be frozen into the
    traced function). The logs gain `kl` (the KL term kl_weight * KL as it
    entered the loss), `data_loss` (= loss - kl) and `kl_weight`, and with
    validation data `val_kl` and `val_data_loss`, for the history, the
    progress bar and TensorBoard; put this callback before other callbacks
    that read batch or epoch logs (Keras runs `History` after them). In
    `model.evaluate(..., callbacks=[...])` the test batch logs and the
    `on_test_end` logs of the callbacks after this one gain `kl` and
    `data_loss`; what `evaluate` returns is what Keras returns for a model of
    `keras.layers.Dense` layers with the same `compile` arguments (Keras hands
    callbacks a copy of its logs), so `loss, acc = model.evaluate(...)`
    unpacks. `train_on_batch` and `test_on_batch` are untouched.

    Note: with `steps_per_execution > 1` Keras calls batch hooks once per
    execution, so the weight changes at that granularity.

    Args:
        num_examples: N, the number of training examples (positive int).
        schedule: "constant" (default), "linear_warmup", "cyclical",
            "blundell", or a `KLSchedule` instance.
        per_layer_kl: keep each layer's `<layer>_kl` entry in the logs too.

    Example:
    >>> x = np.random.rand(32, 3).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(1)])
    >>> model.compile("adam", "mse")
    >>> scheduler = KLScheduler(len(x), schedule=kl_schedules.LinearWarmup(epochs=2))
    >>> history = model.fit(x, y, epochs=2, verbose=0, callbacks=[scheduler])
    >>> sorted(history.history)
    ['data_loss', 'kl', 'kl_weight', 'loss']
    >>> history.history["kl_weight"]  # one batch per epoch: factors 0 and 0.5, / 32
    [0.0, 0.015625]
    """

    def __init__(self, num_examples, schedule="constant", per_layer_kl=False):
        super().__init__()
        self.num_examples = check.integer("num_examples", num_examples)
        self.schedule = kl_schedules.get(schedule)
        self.per_layer_kl = bool(per_layer_kl)
        self._layers = []
        self._trackers = []
        self._reader = None
        self._last_value = None
        self._steps_per_epoch = None
        self._epoch = 0
        self._in_fit = False
        self._train_kl = self._val_kl = None

    def set_model(self, model):
        super().set_model(model)
        self._layers = kl_layers(model)
        for layer in self._layers:
            layer._kl_weight_managed = True
        self._trackers = [(layer.name, layer.kl_tracker) for layer in self._layers
                          if hasattr(layer, "kl_tracker")]
        self._reader = None
        self._last_value = None

    def on_train_begin(self, logs=None):
        if not self._layers:
            raise ValueError(
                "KLScheduler found no tfp_bnn variational layer in the model."
            )
        steps = (self.params or {}).get("steps")
        if self.schedule.needs_steps_per_epoch and not steps:
            raise ValueError(
                f"{self.schedule!r} needs the number of steps per epoch; pass "
                "`steps_per_epoch` to fit() for a dataset of unknown length."
            )
        self._steps_per_epoch = steps
        self._in_fit = True

    def on_train_end(self, logs=None):
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._reset_trackers()
        self._train_kl = self._val_kl = None

    def current_weight(self, batch):
        factor = self.schedule.factor(self._epoch, batch, self._steps_per_epoch)
        return factor / self.num_examples

    def on_train_batch_begin(self, batch, logs=None):
        value = self.current_weight(batch)
        if value != self._last_value:
            _sync_training_state(self.model)
            for layer in self._layers:
                layer.kl_weight.assign(value)
            self._last_value = value

    # -- the KL entries of the logs ------------------------------------------------
    # The layers' trackers are not Keras metrics (tfp_bnn/layers/_kl_tracking.py),
    # so `evaluate` and friends return what they return for plain Keras layers;
    # this callback resets them when Keras resets its metrics and reads them
    # into the logs it hands on.
    def _reset_trackers(self):
        for _, tracker in self._trackers:
            tracker.reset_state()

    def _read_trackers(self):
        """{layer name: batch-size-weighted mean of its KL term} since the last reset."""
        if not self._trackers:
            return {}
        _sync_training_state(self.model)  # JAX: the trackers as the last step left them
        if self._reader is None:
            trackers = [tracker for _, tracker in self._trackers]
            if _backend.is_jax():
                self._reader = lambda: keras.ops.stack([t.result() for t in trackers])
            else:
                # One call per batch instead of one small op per layer; outside any
                # replica context, so on-read variables sum over replicas.
                self._reader = tf.function(lambda: tf.stack([t.result() for t in trackers]))
        totals = {}
        values = keras.ops.convert_to_numpy(self._reader()).tolist()
        for (name, _), value in zip(self._trackers, values):
            totals[name] = totals.get(name, 0.0) + value  # equal names in nested models
        return totals

    def _write(self, logs, values, prefix=""):
        for name, value in values.items():
            logs[f"{prefix}{name}_kl"] = value
        consolidate_kl_logs(logs, [name for name, _ in self._trackers], self.per_layer_kl)

    def on_train_batch_end(self, batch, logs=None):
        if logs is not None:
            self._write(logs, self._read_trackers())

    def on_test_begin(self, logs=None):
        if self._in_fit:  # validation within fit: keep the epoch's training values
            self._train_kl = self._read_trackers()
        self._reset_trackers()

    def on_test_batch_end(self, batch, logs=None):
        if logs is not None:
            self._write(logs, self._read_trackers())

    def on_test_end(self, logs=None):
        values = self._read_trackers()
        if self._in_fit:  # on_epoch_end writes them as the `val_` entries
            self._val_kl = values
        if logs is not None:  # a copy: what `evaluate` returns stays Keras's own
            self._write(logs, values)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            train = self._train_kl if self._train_kl is not None else self._read_trackers()
            self._write(logs, train)
            if self._val_kl is not None and "val_loss" in logs:
                self._write(logs, self._val_kl, prefix="val_")
            logs["kl_weight"] = float(self._last_value) if self._last_value is not None else None

    def get_config(self):
        return {
            "num_examples": self.num_examples,
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "per_layer_kl": self.per_layer_kl,
        }


def _sync_training_state(model):
    """Lets an assignment made now reach the next training step on JAX.

    Keras' JAX trainer carries the model's state from step to step outside
    its variables and reads the variables again only after a callback synced
    that state back into them (`jax_state_sync`); other backends train on the
    variables themselves and have nothing to sync.
    """
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()


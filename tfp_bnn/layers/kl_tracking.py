"""The per-layer KL log that `tfp_bnn.callbacks.KLScheduler` reads.

Every layer that adds kl_weight * KL to the loss also records that term in
`layer.kl_tracker`, a `keras.metrics.Mean` weighted by batch size (as Keras
weights its `loss`), so `loss - sum of the trackers` is the data term.

The tracker is deliberately not one of the layer's `metrics`: a Keras 3
layer reports every metric it owns through `model.metrics`, so each
variational layer would add a `<layer>_kl` entry to what `evaluate`,
`train_on_batch` and `test_on_batch` return and break
`loss, acc = model.evaluate(...)` as written for `keras.layers.Dense`. The
metric still lives in the layer (its update runs inside the compiled step,
its variables are on-read-synchronized under `tf.distribute`, and it is
saved as before); only the `metrics` list leaves it out. `KLScheduler`
resets and reads the trackers around epochs and evaluations.
"""

import keras
import tensorflow as tf


class KLTracking:
    """Mixin for Keras layers that add a weighted KL with `add_loss`.

    Call `_create_kl_tracker()` in `__init__` after `Layer.__init__`, and
    `_record_kl(penalty, batch_size)` with every term added to the loss.
    """

    def _create_kl_tracker(self):
        self.kl_tracker = keras.metrics.Mean(name=f"{self.name}_kl")

    def _record_kl(self, penalty, batch_size):
        """Logs `penalty` (the term added to the loss) for `batch_size` rows."""
        self.kl_tracker.update_state(penalty, sample_weight=tf.cast(batch_size, "float32"))

    @property
    def metrics(self):
        """The layer's metrics as Keras reports them: without the KL tracker."""
        hidden = getattr(self, "kl_tracker", None)
        return [metric for metric in super().metrics if metric is not hidden]

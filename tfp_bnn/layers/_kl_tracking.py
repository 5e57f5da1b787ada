"""How a layer's KL enters the loss once per step, and the per-layer KL log
that `tfp_bnn.callbacks.KLScheduler` reads.

Once per step. KL(q || p) is a function of the weights, not of the inputs,
so like a `kernel_regularizer` it belongs in the objective once per step
however often the layer is called: by two branches of a functional model,
by `TimeDistributed` at every step, by an RNN cell inside its loop. Keras
has a public mechanism with exactly that count: `Layer.losses` holds, once,
`variable.regularizer(variable)` for every trainable variable that has a
regularizer, and `fit` and `evaluate` read `losses` once per step on every
backend, outside any loop (edward2 carries its KL the same way). So at its
first call, when its variables exist, a layer sets a `KLRegularizer` on one
of its trainable variables; the regularizer returns the layer's whole
kl_weight * KL, computed from the layer's variables alone. Inside JAX's
stateless training step Keras reads every variable, `kl_weight` included,
at the value of that step (`Variable.value` is the stateless scope's), so a
`KLScheduler` assignment reaches the compiled step.

The estimator. The closed form where the layer uses it; otherwise a
one-sample Monte Carlo estimate log q(w) - log p(w) at a fresh posterior
draw w ~ q. The draw made by the forward pass would do as well, but it
lives inside the call (and inside a loop body for a recurrent cell); a
fresh draw is an equally unbiased estimate of KL(q || p) and its gradient
(Blundell et al. 2015, sec. 3.1 take any sample of q), independent of the
noise of the forward pass.

The user's regularizers stay: the `KLRegularizer` goes on a trainable
variable without one (the posterior's scale parameter, as a rule); if every
trainable variable has one, it wraps that of the first and returns the sum.

The log. Every time Keras reads the layer's regularization loss the term is
recorded in `layer.kl_tracker`, a `keras.metrics.Mean`, as one entry: one
per step of `fit` and `evaluate`, as the term counts once in the loss. The
entry is weighted by the static batch size of the layer's last call, as
Keras weights its `loss` (always known on JAX), or by the last one known
(1 before any) where the batch size is not static (a traced TensorFlow
step): then `loss - kl` is exact when the batches have one size, or when
the weights do not change between them, as in `evaluate`. A Monte Carlo
estimate over one draw per row (the node layers') uses that many rows too.

The tracker is deliberately not one of the layer's `metrics`: a Keras 3
layer reports every metric it owns through `model.metrics`, so each
variational layer would add a `<layer>_kl` entry to what `evaluate`,
`train_on_batch` and `test_on_batch` return and break
`loss, acc = model.evaluate(...)` as written for `keras.layers.Dense`. The
metric still lives in the layer (its update runs inside the compiled step,
its variables are on-read-synchronized under `tf.distribute`, and it is
saved as before); only the `metrics` list leaves it out. On JAX, where
the compiled steps are pure functions of the state Keras hands them, the
tracker's variables are part of the layer's `non_trainable_variables` (as
Keras documents metric state there), so that its updates leave the step.
"""

import keras
from keras import ops

from tfp_bnn import _backend


@keras.saving.register_keras_serializable(package="tfp_bnn")
class KLRegularizer(keras.regularizers.Regularizer):
    """A weight regularizer that returns a layer's kl_weight * KL(q || p).

    Keras adds it to `layer.losses` once, whatever the number of calls. It
    ignores the variable it is set on (the KL is a function of all the
    layer's weights) and adds that variable's own `regularizer`, if any.

    Args:
        layer: the layer whose KL it returns; it must define
            `_kl_regularization()`.
        regularizer: the regularizer of the variable it is set on, or None.

    The layer is not part of the config: the layer sets a new one at its
    first call, so a saved model carries only the user's regularizer.
    """

    def __init__(self, layer=None, regularizer=None):
        self.layer = layer
        self.regularizer = keras.regularizers.get(regularizer)

    def __call__(self, x):
        # Under tf.distribute each replica returns the whole KL; Keras divides
        # the model's losses by the replica count before gradients are summed
        # (tests/integration/test_distribute_mirrored.py holds Keras to that).
        penalty = ops.zeros((), "float32") if self.layer is None else (
            self.layer._kl_regularization())
        if self.regularizer is not None:
            penalty = penalty + ops.cast(self.regularizer(x), penalty.dtype)
        return penalty

    def get_config(self):
        return {"regularizer": keras.regularizers.serialize(self.regularizer)}


class KLTracking:
    """Mixin for Keras layers whose kl_weight * KL enters the loss once per step.

    Call `_create_kl_tracker()` in `__init__` after `Layer.__init__`, and
    `_claim_kl(static_rows)` in `call` (it sets the `KLRegularizer` the
    first time and returns False: the call itself adds nothing to the loss).
    Implement `_deferred_kl_penalty(rows)`: kl_weight * KL from the weights
    alone, logged with `_record_kl`.
    """

    def _create_kl_tracker(self):
        self.kl_tracker = keras.metrics.Mean(name=f"{self.name}_kl")
        self._kl_regularizer = None
        self._kl_rows = 1

    def _record_kl(self, penalty, batch_size):
        """Logs `penalty` (the term added to the loss) with weight `batch_size`."""
        self.kl_tracker.update_state(penalty, sample_weight=ops.cast(batch_size, "float32"))

    def _claim_kl(self, static_rows=None):
        """Sets the layer's `KLRegularizer` (once) and notes `static_rows`; False.

        The KL enters through the regularizer, once per read of the model's
        `losses`, never through `add_loss` in a call. `static_rows` is the
        batch size of the call's inputs as an int, or None when not static.
        """
        if static_rows is not None:
            self._kl_rows = int(static_rows)
        self._set_kl_regularizer()
        return False

    def _set_kl_regularizer(self):
        """Sets `KLRegularizer(self)` on one trainable variable, once (see module)."""
        if getattr(self, "_kl_regularizer", None) is not None:
            return
        variables = self.trainable_weights
        if not variables:
            return  # frozen: no gradient to give; a later call sets it
        host = next((v for v in variables if v.regularizer is None), variables[0])
        self._kl_regularizer = KLRegularizer(self, host.regularizer)
        host.regularizer = self._kl_regularizer

    def _kl_regularization(self):
        """kl_weight * KL as it enters the loss, logged as one entry (see module).

        Zero for a layer whose KL its model adds itself (`kl_penalty`).
        """
        if getattr(self, "_kl_from_caller", False):
            return ops.zeros((), "float32")
        return self._deferred_kl_penalty(self._kl_rows)

    def _deferred_kl_penalty(self, rows):
        raise NotImplementedError(f"{type(self).__name__} must define `_deferred_kl_penalty`.")

    @property
    def variables(self):
        """The layer's state as Keras lists it; on JAX with the KL tracker's."""
        variables = super().variables
        tracker = getattr(self, "kl_tracker", None)
        if tracker is None or not _backend.is_jax():
            return variables
        return variables + [v for v in tracker.variables
                            if not any(v is known for known in variables)]

    @property
    def metrics(self):
        """The layer's metrics as Keras reports them: without the KL tracker."""
        hidden = getattr(self, "kl_tracker", None)
        return [metric for metric in super().metrics if metric is not hidden]

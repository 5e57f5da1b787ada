"""The per-layer KL log that `tfp_bnn.callbacks.KLScheduler` reads, and the
rule that a layer's KL enters the loss once per forward pass.

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
resets and reads the trackers around epochs and evaluations. On JAX, where
the compiled steps are pure functions of the state Keras hands them, the
tracker's variables are part of the layer's `non_trainable_variables` (as
Keras documents metric state there), so that its updates leave the step.

Once per forward pass. KL(q || p) is a function of the weights, not of the
inputs, so like a `kernel_regularizer` it belongs in the objective once per
step however often the layer is called: by two branches of a functional
model, by `TimeDistributed` at every step, by an RNN cell at every step.
Keras opens one `CallContext` per call of the outermost layer (the model in
`fit`, `evaluate`, `predict` and an eager `model(x)`), and clears every
sublayer's `add_loss` terms when it does; a layer adds its KL at its first
call within that context and skips the later ones (`_claim_kl`).

Inside a loop body (the `tf.while_loop` of a traced RNN, a `tf.cond`
branch, the `tf.vectorized_map` of `TimeDistributed` over an unknown
number of steps) a tensor cannot leave the loop, so the layer only marks
its KL as pending there; the term is computed when the model's `losses` are
read (in `compute_loss`, outside the loop) from the weights alone: the
closed form where the layer uses it, otherwise a Monte Carlo estimate with
its own posterior draw (equally unbiased, independent of the draws made in
the loop). That term is logged for the static batch size of the loop's
inputs, or for 1 row when it is unknown (then `KLScheduler`'s epoch `kl`
weights every step alike, where Keras's `loss` weights steps by batch size:
the two differ only when batches differ in size and the KL moves between
them).
"""

import threading
import weakref

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _keras_internals

# The graphs of a loop or branch body: a tensor made in one cannot be used
# after the loop (`tensorflow.python.ops.control_flow_util_v2`). Matched by
# name, as TensorFlow does not export them.
_BODY_GRAPHS = frozenset({"WhileBodyFuncGraph", "WhileCondFuncGraph", "CondBranchFuncGraph"})
# `tf.vectorized_map` traces its function under this name scope in the
# caller's graph and converts every op made there.
_PFOR_SCOPE = "loop_body"

# CallContext -> ids of the layers whose KL it holds. Keras keeps one
# context per thread (MirroredStrategy traces each replica in its own), and
# the entry dies with the context.
_COUNTED = weakref.WeakKeyDictionary()
# layer -> {thread id: rows} for KL terms deferred out of a loop body.
_PENDING = weakref.WeakKeyDictionary()


def in_loop_body():
    """True while tracing the body of a while loop, a cond branch or a vectorized map.

    A TensorFlow graph question: always False on JAX.
    """
    if _backend.is_jax() or tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    while graph is not None:
        if type(graph).__name__ in _BODY_GRAPHS:
            return True
        graph = getattr(graph, "outer_graph", None)
    return _PFOR_SCOPE in tf.get_current_name_scope().split("/")


class KLTracking(_keras_internals.LossHooks):
    """Mixin for Keras layers that add a weighted KL with `add_loss`.

    Call `_create_kl_tracker()` in `__init__` after `Layer.__init__`. In
    `call`, add the KL only when `_claim_kl(static_rows)` is True, and then call
    `_record_kl(penalty, batch_size)` with the term added to the loss.
    Implement `_deferred_kl_penalty(rows)`: kl_weight * KL from the weights
    alone, logged with `_record_kl`, for calls inside a loop body.
    """

    def _create_kl_tracker(self):
        self.kl_tracker = keras.metrics.Mean(name=f"{self.name}_kl")

    def _record_kl(self, penalty, batch_size):
        """Logs `penalty` (the term added to the loss) for `batch_size` rows."""
        self.kl_tracker.update_state(penalty, sample_weight=ops.cast(batch_size, "float32"))

    def _claim_kl(self, static_rows):
        """Whether this call adds its KL now.

        `static_rows` is the batch size of the call's inputs as an int, or
        None when it is not static. False when the KL is already in the
        current outer call's losses, and inside a loop body, where the KL is
        left pending for the `losses` read after the loop (see the module
        docstring).
        """
        context = _keras_internals.current_call_context()
        if context is not None:
            counted = _COUNTED.setdefault(context, set())
            if id(self) in counted:
                return False
            counted.add(id(self))
        if in_loop_body():
            rows = 1 if static_rows is None else int(static_rows)
            _PENDING.setdefault(self, {})[threading.get_ident()] = rows
            return False
        return True

    def _deferred_kl_penalty(self, rows):
        raise NotImplementedError(f"{type(self).__name__} must define `_deferred_kl_penalty`.")

    def _before_losses_read(self):
        pending = _PENDING.get(self)
        if pending:
            rows = pending.pop(threading.get_ident(), None)
            if rows is not None:
                self.add_loss(self._deferred_kl_penalty(rows))

    def _before_losses_cleared(self):
        # Keras clears every sublayer's losses when an outer call starts: a
        # KL left pending by an earlier call goes with them.
        pending = _PENDING.get(self)
        if pending:
            pending.pop(threading.get_ident(), None)

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

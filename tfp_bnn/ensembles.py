"""Deep ensembles: M networks trained side by side in one `fit`, predicting their mixture.

Lakshminarayanan, Pritzel and Blundell (2017, NeurIPS): M randomly initialised networks,
each trained on a proper scoring rule (sec. 2.2), predict the equal mixture of their
predictive distributions (sec. 2.4).

`deep_ensemble(members)` puts M built models with the same input and output shapes into one
functional model whose `EnsembleMembers` layer runs them all:

- in `fit`, `evaluate` and a plain call the output is [B, M, ...], member m's at [:, m];
  compile with `MemberLoss(loss)`, which sums `loss` over the members' slices, so each
  member's gradient is that of its own loss (and its own regularisers): M trainings in one
  step, reported as the sum of the M losses. `MixtureAccuracy` scores a classifier's mixture.
- inside `tfp_bnn.predict` (S samples, inputs tiled S times) tile s is member s mod M, so
  `tfp_bnn.predict.regression(ensemble, x, num_samples=M)` is the M-member mixture, its
  epistemic variance the spread of the member means. The layer declares
  `samples_multiple = M`: `tfp_bnn.predict` and `tfp_bnn.export.export_predictive` refuse a
  `num_samples` or `samples_per_call` that is not a multiple of M (a direct `sample_trace` of
  another size raises); a Bayesian member gets S / M samples of its own weights.

Deviations from the paper: members differ by their initialisation only and see the same
minibatches in the same order (the paper, sec. 2.4, also shuffles the data per member; a
per-member permutation inside one step would change nothing, as the batch loss is a mean over
rows); adversarial training (sec. 2.3) is not done.

Members that are chains of `keras.layers.Dense` of one architecture have their kernels stacked
on a member axis and applied by one batched matmul per layer (`vectorize=True`, the default):
same weights and function, fewer ops (an M = 5 ensemble of 8-50-2 MLPs trained 1.2-2x faster,
`benchmarks/ensemble.py`).

Example:
>>> x = np.random.rand(32, 4).astype("float32")
>>> y = x.sum(axis=1, keepdims=True)
>>> members = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
...                              keras.layers.Dense(2)]) for m in range(3)]
>>> ensemble = tfp_bnn.ensembles.deep_ensemble(members)
>>> ensemble.compile("adam", loss=tfp_bnn.ensembles.MemberLoss(tfp_bnn.losses.GaussianNLL()))
>>> history = ensemble.fit(x, y, epochs=2, verbose=0)
>>> prediction = tfp_bnn.predict.regression(ensemble, x[:5], num_samples=3)
>>> prediction.mean.shape
(5, 1)
"""

import keras
from keras import ops

from tfp_bnn import _keras_internals
from tfp_bnn import _validation as check
from tfp_bnn.layers._tracing import sample_context
from tfp_bnn.layers._tracing import sample_trace


def _shapes(tensors):
    return [tuple(t.shape)[1:] for t in tensors]


def check_members(members):
    """`members` as a list of M >= 1 distinct built Keras models with the same signature.

    Args:
        members: a list or tuple of built functional or Sequential models,
            each with one input and one output, of the same shapes as the
            first member's, no model twice.

    Returns:
        The members as a list (ValueError naming the first bad member).

    Example:
    >>> member = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> check_members([member, keras.models.clone_model(member)])[0] is member
    True
    """
    if isinstance(members, keras.Model) or not isinstance(members, (list, tuple)):
        raise ValueError(f"`members` must be a list of Keras models, got "
                         f"{type(members).__name__}.")
    members = list(members)
    check.integer("len(members)", len(members))
    for index, member in enumerate(members):
        if not isinstance(member, keras.Model):
            raise ValueError(f"`members[{index}]` must be a Keras model, got "
                             f"{type(member).__name__}.")
        try:
            inputs, outputs = list(member.inputs), list(member.outputs)
        except (AttributeError, ValueError):
            raise ValueError(f"`members[{index}]` must be a built functional or Sequential "
                             "model (one with known inputs and outputs).") from None
        if len(inputs) != 1 or len(outputs) != 1:
            raise ValueError(f"`members[{index}]` must have one input and one output, got "
                             f"{len(inputs)} and {len(outputs)}.")
        first = members[0]
        for what in ("inputs", "outputs"):
            got, want = _shapes(getattr(member, what)), _shapes(getattr(first, what))
            if got != want:
                raise ValueError(f"`members[{index}]` {what} have shape {got[0]}, but "
                                 f"members[0]'s have {want[0]}: members must match.")
    if len({id(member) for member in members}) != len(members):
        raise ValueError("`members` holds the same model more than once; each member needs "
                         "its own weights.")
    return members


def _dense_chain(member):
    """The Dense layers of a plain chain input -> Dense -> ... -> Dense, else None."""
    layers = [layer for layer in member.layers if not isinstance(layer, keras.layers.InputLayer)]
    if not layers or len(member.inputs[0].shape) != 2:
        return None
    previous = member.inputs[0]
    for layer in layers:
        nodes = _keras_internals.inbound_nodes(layer)
        if type(layer) is not keras.layers.Dense or getattr(layer, "lora_enabled", False) \
                or getattr(layer, "quantization_mode", None) or len(nodes) != 1:
            return None
        node = nodes[0]
        if len(node.input_tensors) != 1 or node.input_tensors[0] is not previous:
            return None
        previous = node.output_tensors[0]
    return layers if previous is member.outputs[0] else None


def _vectorizable(members):
    chains = [_dense_chain(member) for member in members]
    if any(chain is None for chain in chains):
        return None
    shapes = {tuple((tuple(l.kernel.shape), l.use_bias, l.activation) for l in chain)
              for chain in chains}
    return chains if len(shapes) == 1 else None


@keras.saving.register_keras_serializable(package="tfp_bnn")
class EnsembleMembers(keras.layers.Layer):
    """Runs M member models on one input: outputs [B, M, ...], or one member per sample tile.

    The layer of `deep_ensemble` (see the module docstring for the outputs in and out of
    `tfp_bnn.predict`).

    Args:
        members: list of M >= 1 built Keras models, one input and one output each, same shapes.
        vectorize: bool; apply members that are Dense chains of one architecture as one
            batched matmul per layer.

    Call arguments:
        inputs: [B, ...], the members' input (tiled [S * B, ...] inside `sample_trace`).
        training: passed on to the members.

    Returns:
        [B, M, ...] (outside `sample_trace`) or [S * B, ...], tile s from member s mod M.

    Example:
    >>> members = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    ...            for m in range(3)]
    >>> layer = EnsembleMembers(members)
    >>> layer(np.zeros((5, 4), "float32")).shape, layer.vectorized
    (TensorShape([5, 3, 2]), True)
    """

    def __init__(self, members, vectorize=True, **kwargs):
        super().__init__(**kwargs)
        self.members = check_members(members)
        self.vectorize = check.boolean("vectorize", vectorize)
        self._chains = _vectorizable(self.members) if self.vectorize else None

    @property
    def num_members(self):
        return len(self.members)

    @property
    def samples_multiple(self):
        """M: `tfp_bnn.predict` keeps every traced call's sample count a multiple of it."""
        return len(self.members)

    @property
    def vectorized(self):
        """True when the members run as one stacked Dense chain."""
        return self._chains is not None

    @property
    def metrics(self):
        # As Keras' Trainer does for nested models: a compiled member's compile metrics
        # belong to its own fit, and were never built in the ensemble's.
        return [metric for member in self.members
                for layer in _keras_internals.flatten_layers(member, include_self=False)
                if not isinstance(layer, keras.Model)
                for metric in _keras_internals.own_metrics(layer)]

    def build(self, input_shape):
        self.built = True

    def _stacked(self, inputs):
        """inputs [M, R, d] -> [M, R, out]: layer i of every member in one batched matmul."""
        hidden = inputs
        for depth in range(len(self._chains[0])):
            layers = [chain[depth] for chain in self._chains]
            dtype = layers[0].compute_dtype
            hidden = ops.matmul(ops.cast(hidden, dtype),
                                ops.stack([ops.cast(l.kernel, dtype) for l in layers]))
            if layers[0].use_bias:
                biases = ops.stack([ops.cast(l.bias, dtype) for l in layers])
                hidden = hidden + ops.expand_dims(biases, 1)
            if layers[0].activation is not None:
                hidden = layers[0].activation(hidden)
        return hidden

    def _per_member(self, inputs, training):
        """inputs [M, R, ...] -> [M, R, ...]: member m on slice m."""
        return ops.stack([member(inputs[m], training=training)
                          for m, member in enumerate(self.members)])

    def call(self, inputs, training=None):
        inputs = ops.convert_to_tensor(inputs)
        count = self.num_members
        context = sample_context()
        if context is None:
            if self._chains is not None:
                stacked = self._stacked(ops.repeat(ops.expand_dims(inputs, 0), count, axis=0))
            else:
                stacked = ops.stack([member(inputs, training=training)
                                     for member in self.members])
            rank = len(stacked.shape)
            return ops.transpose(stacked, [1, 0] + list(range(2, rank)))
        samples = context.num_samples
        if samples % count:
            raise ValueError(
                f"A deep ensemble of {count} members predicts a mixture of its members: "
                f"num_samples (and samples_per_call) must be a multiple of {count}, got a "
                f"call of {samples} samples.")
        tail = tuple(ops.shape(inputs)[1:])
        # Row s * B + b with s = q * M + m: axes [S / M, M, B, ...] hold (q, m, b).
        grid = ops.reshape(inputs, (samples // count, count, -1) + tail)
        rank = len(grid.shape)
        by_member = ops.transpose(grid, [1, 0] + list(range(2, rank)))
        rows = ops.reshape(by_member, (count, -1) + tail)
        if self._chains is not None:
            outputs = self._stacked(rows)
        else:
            with sample_trace(samples // count):
                outputs = self._per_member(rows, training=False)
        out_tail = tuple(ops.shape(outputs)[2:])
        outputs = ops.reshape(outputs, (count, samples // count, -1) + out_tail)
        outputs = ops.transpose(outputs, [1, 0] + list(range(2, len(outputs.shape))))
        return ops.reshape(outputs, (-1,) + out_tail)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_members) + tuple(self.members[0].outputs[0].shape)[1:]

    def get_config(self):
        config = super().get_config()
        config.update({"members": [keras.saving.serialize_keras_object(m) for m in self.members],
                       "vectorize": self.vectorize})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["members"] = [keras.saving.deserialize_keras_object(m)
                             for m in config["members"]]
        return cls(**config)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MemberLoss(keras.losses.Loss):
    """A member loss applied to each member's output [:, m] of a deep ensemble, summed over m.

    Args:
        loss: one member's loss: a `keras.losses.Loss` (e.g. `tfp_bnn.losses.GaussianNLL()`)
            or a Loss class name such as "MeanSquaredError" ("mse" is refused).
        name: name of the loss.
        reduction: as in `keras.losses.Loss`; None (default) keeps that of `loss`.
        dtype: the dtype of the loss computation, as in `keras.losses.Loss`.

    Call arguments:
        y_true: the targets, as the member loss takes them.
        y_pred: [B, M, ...], the ensemble's outputs.

    Returns:
        Per example, the sum over members of the member loss, reduced as `loss` reduces.

    Example:
    >>> loss = MemberLoss("MeanSquaredError")
    >>> y_true = np.zeros((2, 1), "float32")
    >>> y_pred = np.ones((2, 3, 1), "float32")   # 3 members, each off by 1
    >>> float(loss(y_true, y_pred))
    3.0
    """

    def __init__(self, loss, name="member_loss", reduction=None, dtype=None):
        loss = keras.losses.get(loss)
        if not isinstance(loss, keras.losses.Loss):
            raise ValueError(f"`loss` must be a Keras loss object or name, got {loss!r}.")
        super().__init__(name=name, reduction=reduction or loss.reduction, dtype=dtype)
        self.loss = loss

    def call(self, y_true, y_pred):
        # keras.ops: the cheap ensembles (tfp_bnn.layers.ensemble) train with it on JAX too.
        y_pred = keras.ops.convert_to_tensor(y_pred)
        count = y_pred.shape[1] if len(y_pred.shape) >= 2 else None
        if count is None:
            raise ValueError("MemberLoss needs ensemble outputs [batch, members, ...] with a "
                             f"known number of members, got shape {tuple(y_pred.shape)}.")
        return sum(self.loss.call(y_true, y_pred[:, m]) for m in range(count))

    def get_config(self):
        config = super().get_config()
        config["loss"] = keras.saving.serialize_keras_object(self.loss)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["loss"] = keras.saving.deserialize_keras_object(config["loss"])
        return cls(**config)


def mixture_accuracy(y_true, y_pred):
    """Per example, 1.0 if the mixture's most probable class is the label, else 0.0.

    The mixture's class probabilities are the mean of the M members'
    softmax over their logits.

    Args:
        y_true: integer labels [B] (or [B, 1]).
        y_pred: member logits [B, M, C].

    Returns:
        A float tensor [B] of 1.0 (correct) and 0.0.

    Example:
    >>> logits = np.array([[[2.0, 0.0], [0.0, 1.0]]], "float32")   # 1 example, 2 members
    >>> keras.ops.convert_to_numpy(mixture_accuracy(np.array([0]), logits))
    array([1.], dtype=float32)
    """
    probs = keras.ops.mean(keras.ops.softmax(keras.ops.convert_to_tensor(y_pred), axis=-1),
                           axis=1)
    return keras.metrics.sparse_categorical_accuracy(y_true, probs)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MixtureAccuracy(keras.metrics.MeanMetricWrapper):
    """Accuracy of a classifying deep ensemble's predictive (the mixture), from member logits.

    Args:
        name: name of the metric.
        dtype: as in `keras.metrics.Metric`.

    Example:
    >>> metric = MixtureAccuracy()
    >>> metric.update_state(np.array([0, 1]), np.array([[[2.0, 0.0], [0.0, 1.0]],
    ...                                                 [[2.0, 0.0], [1.0, 0.0]]]))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(mixture_accuracy, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}


def deep_ensemble(members, vectorize=True, name="deep_ensemble"):
    """A functional model running `members` side by side (uncompiled).

    Args:
        members: list of M >= 1 built Keras models (functional or Sequential) with one input
            and one output of the same shapes; their own seeds make them differ.
        vectorize: stack the weights of plain Dense-chain members (see `EnsembleMembers`).
        name: the model's name.

    Returns:
        A `keras.Model` with outputs [B, M, ...]; compile it with `MemberLoss(member_loss)`.

    Example:
    >>> members = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    ...            for m in range(5)]
    >>> ensemble = deep_ensemble(members)
    >>> ensemble.compile("adam", loss=MemberLoss(tfp_bnn.losses.GaussianNLL()))
    >>> ensemble.output.shape
    (None, 5, 2)
    """
    members = check_members(members)
    spec = members[0].inputs[0]
    inputs = keras.Input(shape=tuple(spec.shape)[1:], dtype=spec.dtype, name="inputs")
    outputs = EnsembleMembers(members, vectorize=vectorize, name="members")(inputs)
    return keras.Model(inputs, outputs, name=name)


def members_of(model):
    """The member models of a `deep_ensemble` model.

    Args:
        model: a model made by `deep_ensemble` (or loaded from its file).

    Returns:
        The list of the M member models (ValueError for another model).

    Example:
    >>> members = [keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    ...            for m in range(2)]
    >>> members_of(deep_ensemble(members)) == members
    True
    """
    for layer in getattr(model, "layers", []):
        if isinstance(layer, EnsembleMembers):
            return list(layer.members)
    raise ValueError(f"{getattr(model, 'name', model)!r} is not a deep ensemble (no "
                     "EnsembleMembers layer).")

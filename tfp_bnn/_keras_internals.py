"""The private Keras this package touches, in one place.

Keras offers no public hook for a few things tfp_bnn needs: the `training`
of the outer call a recurrent cell runs in, reading variables at their own
dtype under mixed precision, the cell protocol `keras.layers.RNN` runs, the
weights-file writer, the traversal of nested layers, and which variables
hold the random generators' state. Every `keras.src`
import and every private Keras attribute the package reads or writes goes
through this module; nothing else in `tfp_bnn` or `zoo` names them.

Each touchpoint says what it is for, the Keras versions it was checked on
(3.10.0 and 3.15.1, the ends of the `keras>=3.10,<3.16` the package
declares) and whether a public alternative exists. A Keras that
moved or removed one of them makes `import tfp_bnn` fail here with an error
that names the Keras version and the supported range: there is no silent
fallback. `tests/test__keras_internals.py` checks that each one still behaves
as relied on.
"""

import importlib
import inspect

import keras

SUPPORTED_KERAS = ">=3.10,<3.16"


def _unsupported(what):
    return (f"tfp_bnn relies on the private Keras {what}, which Keras "
            f"{keras.__version__} does not have; tfp_bnn supports Keras {SUPPORTED_KERAS}.")


def _private(module, name):
    """`module.name` from Keras' private tree, or an ImportError naming the versions."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ImportError(_unsupported(f"`{module}.{name}`")) from error


def _private_method(cls, name, parameters):
    """Checks that `cls.name` exists with exactly `parameters`; returns the name."""
    method = getattr(cls, name, None)
    if not callable(method):
        raise RuntimeError(_unsupported(f"method `{cls.__name__}.{name}`"))
    found = tuple(inspect.signature(method).parameters)
    if found != parameters:
        raise RuntimeError(_unsupported(f"method `{cls.__name__}.{name}{parameters}`")
                           + f" It has the parameters {found}.")
    return name


# -- calls ---------------------------------------------------------------------
# The `CallContext` Keras opens for the outermost layer call and clears when
# that call returns: a recurrent cell reads the call's `training` from it.
# Checked on 3.10.0 and 3.15.1. No public alternative.
_global_state = _private("keras.src.backend.common", "global_state")
if not callable(getattr(_global_state, "get_global_attribute", None)):
    raise ImportError(_unsupported("`global_state.get_global_attribute`"))
_CALL_CONTEXT = "current_call_ctx"
# The global's name is a string in Keras' code: check that `Layer` still
# keeps the context under it (a renamed global would read as None forever).
_private_method(keras.layers.Layer, "_get_call_context", ("self",))
if _CALL_CONTEXT not in keras.layers.Layer._get_call_context.__code__.co_consts:
    raise ImportError(_unsupported(f"global attribute {_CALL_CONTEXT!r}"))
_private_method(_private("keras.src.layers.layer", "CallContext"), "get_value",
                ("self", "arg_name", "default"))


def current_call_context():
    """The `CallContext` of the outermost layer call in progress, or None."""
    return _global_state.get_global_attribute(_CALL_CONTEXT)


def call_training():
    """The `training` of the outermost layer call in progress, or None."""
    context = current_call_context()
    return None if context is None else context.get_value("training")


# -- stateless calls ------------------------------------------------------------
# Whether a `keras.StatelessScope` is open: on JAX, Keras' train, test and
# predict steps (and `model.stateless_call`) run the model inside one, an
# eager `model(x)` does not; a distribution layer returns its distribution
# only to the latter (`tfp_bnn.layers.DistributionLambda`). Whether a
# `SymbolicScope` is open: Keras' JAX trainer builds the loss' state by
# calling it on stand-in tensors inside one (`backend.compute_output_spec`),
# which no distribution layer produced (`tfp_bnn.distributions.carrier`).
# Checked on 3.10.0 and 3.15.1. No public alternative (the public
# `keras.StatelessScope` opens one only).
in_stateless_scope = _private("keras.src.backend.common.stateless_scope", "in_stateless_scope")
in_symbolic_scope = _private("keras.src.backend.common.symbolic_scope", "in_symbolic_scope")


# -- masks ------------------------------------------------------------------------
# Reading and attaching the Keras mask of a tensor, as Keras' own
# MultiHeadAttention does for its query mask. Checked on 3.10.0 and 3.15.1.
# No public alternative (`compute_mask` covers the symbolic path only).
get_keras_mask = _private("keras.src.backend.common.masking", "get_keras_mask")
set_keras_mask = _private("keras.src.backend.common.masking", "set_keras_mask")

# -- recurrent cells ----------------------------------------------------------------
# The base `keras.layers.RNN` asks for per-pass dropout masks
# (`get_dropout_mask`, `get_recurrent_dropout_mask`, `reset_dropout_mask`,
# `reset_recurrent_dropout_mask`); the Bayesian cells draw their weights once
# per sequence pass through it. Checked on 3.10.0 and 3.15.1. No public
# alternative: Keras exports the LSTM/GRU cells but not their base.
DropoutRNNCell = _private("keras.src.layers.rnn.dropout_rnn_cell", "DropoutRNNCell")
for _name in ("get_dropout_mask", "get_recurrent_dropout_mask"):
    _private_method(DropoutRNNCell, _name, ("self", "step_input"))
for _name in ("reset_dropout_mask", "reset_recurrent_dropout_mask"):
    _private_method(DropoutRNNCell, _name, ("self",))

# -- mixed precision --------------------------------------------------------------
# `AutocastScope(None)` reads variables at their own dtype inside a layer call
# that Keras autocasts (mixed precision). Checked on 3.10.0 and 3.15.1. No
# public alternative: `autocast=False` does not stop Keras 3 from entering the
# scope.
AutocastScope = _private("keras.src.backend", "AutocastScope")

# -- graph models -------------------------------------------------------------------
# The class of functional models (those built from `keras.Input`), which
# `keras.models.clone_model` rewires layer by layer as it does Sequential.
# Checked on 3.10.0 and 3.15.1. No public alternative: `keras.Model` also
# covers subclassed models, which clone_model cannot rewire.
Functional = _private("keras.src.models.functional", "Functional")


def inputs_struct(model):
    """The nested structure (list or dict) of a functional model's inputs, or None.

    Functional models keep it as `_inputs_struct` (3.10.0 and 3.15.1); other
    models have none. No public alternative: `model.inputs` is flat.
    """
    return model._inputs_struct if isinstance(model, Functional) else None


def producing_layer(tensor):
    """The layer that made the symbolic `tensor` (its `_keras_history.operation`).

    Checked on 3.10.0 and 3.15.1. No public alternative.
    """
    return tensor._keras_history.operation


def inbound_nodes(layer):
    """The layer's call nodes in the functional graph, one per call (`_inbound_nodes`).

    Each has `input_tensors` and `output_tensors`. Checked on 3.10.0 and
    3.15.1. No public alternative: `layer.input` refuses a shared layer.
    """
    return layer._inbound_nodes


# -- layer traversal --------------------------------------------------------------
# `_flatten_layers` walks every tracked sublayer, those of plain layers
# included (composite layers keep theirs there). Checked on 3.10.0 and 3.15.1.
# No public alternative: `model.layers` lists the top level of a model only.
_private_method(keras.layers.Layer, "_flatten_layers", ("self", "include_self", "recursive"))


def flatten_layers(layer, include_self=True, recursive=True):
    """`layer` (if `include_self`) and its tracked sublayers, depth first, each once."""
    return layer._flatten_layers(include_self=include_self, recursive=recursive)


def own_metrics(layer):
    """The metrics a layer tracks itself, not those of its sublayers (`_metrics`).

    Checked on 3.10.0 and 3.15.1. No public alternative: `layer.metrics`
    includes the sublayers'.
    """
    return layer._metrics


# -- training loop ------------------------------------------------------------------
def set_initial_epoch(model, epoch):
    """Makes the next `fit` start at `epoch`, as Keras' BackupAndRestore does.

    `fit` reads `model._initial_epoch` in place of its `initial_epoch`
    argument. Checked on 3.10.0 and 3.15.1. No public alternative for a
    callback (the argument belongs to the caller of `fit`).
    """
    model._initial_epoch = int(epoch)


# -- random state -------------------------------------------------------------------
# Every `keras.random.SeedGenerator` keeps its state in a variable it names
# "seed_generator_state" (`keras/src/random/seed_generator.py`); `model.variables`
# (public) lists it, `model.weights` does not. No public API says which variables
# belong to a generator: the name is the touchpoint. Checked on 3.10.0 and 3.15.1.
SEED_STATE_NAME = "seed_generator_state"


def seed_states(model):
    """The model's `keras.random.SeedGenerator` state variables, in model order.

    `save_weights` leaves them out (they are not weights), and a compiled JAX
    prediction must thread them; other state outside the weights (a layer's
    metric trackers) is not random state.
    """
    return [v for v in model.variables if v.path.split("/")[-1] == SEED_STATE_NAME]


# -- saving -------------------------------------------------------------------------
# The weights-file writer behind `model.save_weights`, into a BytesIO instead
# of a path. Checked on 3.10.0 and 3.15.1. No public alternative:
# `save_weights` takes a path only.
H5IOStore = _private("keras.src.saving.saving_lib", "H5IOStore")
_save_state = _private("keras.src.saving.saving_lib", "_save_state")
_SAVE_STATE_PARAMETERS = ("saveable", "weights_store", "assets_store", "inner_path",
                          "visited_saveables")
if tuple(inspect.signature(_save_state).parameters) != _SAVE_STATE_PARAMETERS:
    raise ImportError(_unsupported(f"`saving_lib._save_state{_SAVE_STATE_PARAMETERS}`"))


def save_weights_state(model, store):
    """Writes `model`'s weights into an open `H5IOStore`, as `save_weights` does."""
    _save_state(model, weights_store=store, assets_store=None, inner_path="",
                visited_saveables=set())

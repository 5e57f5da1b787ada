"""Each private Keras touchpoint still exists and behaves as tfp_bnn relies on.

A Keras release that moves, renames or changes one of them fails here by
name, not as a wrong KL or a float16 posterior somewhere downstream. The last
tests check that nothing outside `tfp_bnn/_keras_internals.py` reaches into
Keras' private tree.
"""

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import _keras_internals as internals
from tfp_bnn.callbacks.atomic_backup_and_restore import weights_bytes

ROOT = Path(__file__).resolve().parents[1]


# -- failing loudly --------------------------------------------------------------
def test_a_missing_private_symbol_raises_naming_the_keras_version_and_range():
    with pytest.raises(ImportError) as info:
        internals._private("keras.src.backend.common.masking", "no_such_symbol")
    message = str(info.value)
    assert keras.__version__ in message
    assert internals.SUPPORTED_KERAS in message
    assert "no_such_symbol" in message
    with pytest.raises(ImportError, match="no_such_module"):
        internals._private("keras.src.no_such_module", "anything")


def test_a_changed_private_method_signature_raises():
    class Changed:
        def _get_own_losses(self, extra):
            return []

    with pytest.raises(RuntimeError) as info:
        internals._private_method(Changed, "_get_own_losses", ("self",))
    assert keras.__version__ in str(info.value)
    assert "('self', 'extra')" in str(info.value)
    with pytest.raises(RuntimeError, match="Changed._missing"):
        internals._private_method(Changed, "_missing", ("self",))


def test_importing_tfp_bnn_on_a_keras_without_a_touchpoint_fails_at_import():
    script = ("from keras.src.backend.common import masking\n"
              "del masking.set_keras_mask\n"
              "import tfp_bnn\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=300)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError:")
    assert "set_keras_mask" in last_line and keras.__version__ in last_line
    assert internals.SUPPORTED_KERAS in last_line


def test_the_supported_range_is_the_one_setup_declares():
    assert f"keras{internals.SUPPORTED_KERAS}" in (ROOT / "setup.py").read_text()


# -- calls -------------------------------------------------------------------------
class _Spy(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = []

    def call(self, inputs):
        self.seen.append((internals.current_call_context(), internals.call_training()))
        return inputs


def test_call_context_is_set_during_an_outer_call_and_cleared_after():
    spy = _Spy()
    inputs = keras.Input((2,))
    model = keras.Model(inputs, spy(inputs))
    spy.seen.clear()
    assert internals.current_call_context() is None
    model(np.ones((1, 2), "float32"), training=True)
    model(np.ones((1, 2), "float32"), training=False)
    assert internals.current_call_context() is None
    (first, first_training), (second, second_training) = spy.seen
    assert first is not None and second is not None and first is not second
    assert (first_training, second_training) == (True, False)


def test_keras_layer_keeps_its_call_context_under_the_name_read():
    names = keras.layers.Layer._get_call_context.__code__.co_consts
    assert internals._CALL_CONTEXT in names
    assert "no_such_global" not in names


# -- masks -------------------------------------------------------------------------
def test_mask_set_then_get_round_trips_and_embedding_sets_one():
    tensor = tf.ones((2, 3))
    assert internals.get_keras_mask(tensor) is None
    mask = tf.constant([[True, False, True], [False, False, True]])
    internals.set_keras_mask(tensor, mask)
    np.testing.assert_array_equal(internals.get_keras_mask(tensor), mask)
    embedded = keras.layers.Embedding(5, 2, mask_zero=True)(np.array([[1, 0, 2]]))
    np.testing.assert_array_equal(internals.get_keras_mask(embedded), [[True, False, True]])


# -- recurrent cells ----------------------------------------------------------------
def test_dropout_rnn_cell_is_the_base_of_keras_cells_with_the_methods_we_call():
    assert issubclass(keras.layers.LSTMCell, internals.DropoutRNNCell)
    assert issubclass(keras.layers.GRUCell, internals.DropoutRNNCell)
    for name in ("get_dropout_mask", "get_recurrent_dropout_mask"):
        assert tuple(inspect.signature(getattr(internals.DropoutRNNCell, name)).parameters) \
            == ("self", "step_input")
    for name in ("reset_dropout_mask", "reset_recurrent_dropout_mask"):
        assert tuple(inspect.signature(getattr(internals.DropoutRNNCell, name)).parameters) \
            == ("self",)


class _CountingCell(internals.DropoutRNNCell, keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.state_size = 2
        self.output_size = 2
        self.dropout = 0.0
        self.recurrent_dropout = 0.0
        self.seed_generator = keras.random.SeedGenerator(0)
        self.calls = {"mask": 0, "reset": 0, "step": 0}

    def get_dropout_mask(self, step_input):
        self.calls["mask"] += 1
        return super().get_dropout_mask(step_input)

    def reset_dropout_mask(self):
        self.calls["reset"] += 1
        super().reset_dropout_mask()

    def call(self, inputs, states, training=None):
        self.calls["step"] += 1
        return inputs + states[0], [inputs + states[0]]


def test_rnn_asks_the_cell_for_its_dropout_mask_once_per_pass_and_resets_it():
    cell = _CountingCell()
    outputs = keras.layers.RNN(cell, unroll=True)(np.ones((1, 4, 2), "float32"))
    np.testing.assert_allclose(outputs, [[4.0, 4.0]])
    assert cell.calls == {"mask": 1, "reset": 1, "step": 4}


# -- mixed precision ----------------------------------------------------------------
class _ReadsKernel(keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(), initializer="ones")

    def call(self, inputs):
        self.autocast_dtype = keras.ops.convert_to_tensor(self.kernel).dtype
        with internals.AutocastScope(None):
            self.own_dtype = keras.ops.convert_to_tensor(self.kernel).dtype
        return inputs


def test_autocast_scope_none_reads_variables_at_their_own_dtype():
    layer = _ReadsKernel(dtype="mixed_float16")
    layer(np.ones((1, 2), "float16"))
    assert layer.kernel.dtype == "float32"
    assert layer.autocast_dtype == "float16"
    assert layer.own_dtype == "float32"


# -- graph models --------------------------------------------------------------------
def test_functional_is_the_class_of_input_built_models_only():
    inputs = keras.Input((2,))
    functional = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    sequential = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    class Subclassed(keras.Model):
        def call(self, inputs):
            return inputs

    assert isinstance(functional, internals.Functional)
    assert not isinstance(sequential, internals.Functional)
    assert not isinstance(Subclassed(), internals.Functional)


def test_inputs_struct_keeps_a_dict_of_inputs_and_is_none_elsewhere():
    inputs = {"a": keras.Input((2,), name="a"), "b": keras.Input((3,), name="b")}
    joined = keras.layers.Concatenate()([inputs["a"], inputs["b"]])
    struct = internals.inputs_struct(keras.Model(inputs, joined))
    assert isinstance(struct, dict) and sorted(struct) == ["a", "b"]
    assert tuple(struct["b"].shape) == (None, 3)
    sequential = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert internals.inputs_struct(sequential) is None


def test_producing_layer_and_inbound_nodes_follow_the_graph():
    shared, head = keras.layers.Dense(2), keras.layers.Dense(1)
    inputs = keras.Input((2,))
    hidden = shared(shared(inputs))
    outputs = head(hidden)
    assert internals.producing_layer(outputs) is head
    assert internals.producing_layer(hidden) is shared
    nodes = internals.inbound_nodes(shared)
    assert len(nodes) == 2 and len(internals.inbound_nodes(head)) == 1
    assert nodes[0].input_tensors[0] is inputs
    assert nodes[1].input_tensors[0] is nodes[0].output_tensors[0]
    assert nodes[1].output_tensors[0] is hidden


# -- layer traversal -------------------------------------------------------------------
class _Composite(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(2, name="inner")
        self.tracker = keras.metrics.Mean(name="own")

    def call(self, inputs):
        return self.inner(inputs)


def test_flatten_layers_reaches_sublayers_of_plain_layers_and_nested_models():
    composite = _Composite(name="composite")
    inner_model = keras.Sequential([keras.Input((2,)), composite], name="inner_model")
    inputs = keras.Input((2,))
    model = keras.Model(inputs, inner_model(inputs), name="outer")
    names = [layer.name for layer in internals.flatten_layers(model)]
    assert names[0] == "outer"
    assert {"inner_model", "composite", "inner"} <= set(names)
    assert "outer" not in [layer.name for layer in
                           internals.flatten_layers(model, include_self=False)]
    assert [layer.name for layer in internals.flatten_layers(model, recursive=False)] \
        == [layer.name for layer in [model] + model.layers]


def test_own_metrics_are_the_layer_own_not_its_sublayers():
    composite = _Composite()
    composite(np.ones((1, 2), "float32"))
    assert internals.own_metrics(composite) == [composite.tracker]
    assert internals.own_metrics(composite.inner) == []


# -- training loop ----------------------------------------------------------------------
def _tiny_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_set_initial_epoch_makes_fit_start_there():
    model = _tiny_model()
    internals.set_initial_epoch(model, 2)
    history = model.fit(np.ones((4, 1)), np.ones((4, 1)), epochs=5, verbose=0)
    assert history.epoch == [2, 3, 4]


# -- saving ------------------------------------------------------------------------------
def test_every_seed_generator_state_is_found_by_its_name_and_nothing_else():
    class Noisy(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.generator = keras.random.SeedGenerator(3)
            self.tracker = keras.metrics.Mean(name="tracked")

        def call(self, inputs):
            return inputs + keras.random.normal(keras.ops.shape(inputs), seed=self.generator)

    layers = [Noisy(), keras.layers.Dense(2), Noisy()]
    model = keras.Sequential([keras.Input((2,))] + layers)
    # Keras' own name for the state of every generator.
    assert keras.random.SeedGenerator(0).state.name == internals.SEED_STATE_NAME
    assert [id(v) for v in internals.seed_states(model)] == [
        id(layers[0].generator.state), id(layers[2].generator.state)]
    assert internals.seed_states(keras.Sequential([keras.Input((2,)), layers[1]])) == []


def test_h5_store_in_memory_writes_what_load_weights_reads(tmp_path):
    model = _tiny_model()
    model.layers[0].kernel.assign([[2.5]])
    # weights_bytes is H5IOStore on a BytesIO filled by save_weights_state.
    path = tmp_path / "copy.weights.h5"
    path.write_bytes(weights_bytes(model))
    restored = _tiny_model()
    restored.load_weights(str(path))
    for saved, loaded in zip(model.weights, restored.weights):
        np.testing.assert_array_equal(saved.numpy(), loaded.numpy())


# -- nothing else touches private Keras ------------------------------------------------------
FENCED_NAMES = frozenset({
    "_clear_losses", "_flatten_layers", "_flatten_metrics_in_order", "_get_metrics_result_or_logs",
    "_get_own_losses", "_inbound_nodes", "_initial_epoch", "_inputs_struct", "_keras_history",
    "_keras_mask", "_metrics", "_save_state",
})


def _modules():
    for package in ("tfp_bnn", "zoo"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != ROOT / "tfp_bnn" / "_keras_internals.py":
                yield path


def _private_keras_uses(source, label):
    for node in ast.walk(ast.parse(source, label)):
        where = f"{label}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("keras.src"):
                    yield where, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("keras.src") or (
                    module == "keras" and any(a.name == "src" for a in node.names)):
                yield where, module
        elif isinstance(node, ast.Attribute):
            if node.attr in FENCED_NAMES or ast.unparse(node).startswith("keras.src"):
                yield where, ast.unparse(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in FENCED_NAMES:
                yield where, f"def {node.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in FENCED_NAMES or node.value.startswith("keras.src."):
                yield where, repr(node.value)


def test_only_the_internals_module_touches_private_keras():
    found = [use for path in _modules()
             for use in _private_keras_uses(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_the_scan_finds_what_it_forbids():
    probe = ("from keras.src.backend import AutocastScope\n"
             "import keras.src.saving\n"
             "from keras import src\n"
             "layers = model._flatten_layers()\n"
             "hook = getattr(model, '_get_metrics_result_or_logs')\n"
             "class L:\n    def _clear_losses(self):\n        pass\n")
    found = {what for _, what in _private_keras_uses(probe, "probe.py")}
    assert found == {"keras.src.backend", "keras.src.saving", "keras",
                     "model._flatten_layers", "'_get_metrics_result_or_logs'",
                     "def _clear_losses"}


# -- scopes (distribution layers on JAX) ---------------------------------------------
class _RecordsScopes(keras.layers.Layer):
    def call(self, x):
        self.seen = (internals.in_stateless_scope(), internals.in_symbolic_scope())
        return x


@pytest.mark.jax
def test_stateless_and_symbolic_scopes_are_told_apart_from_an_eager_call():
    layer = _RecordsScopes()
    layer(np.ones((1, 2), "float32"))
    assert layer.seen == (False, False)
    keras.Sequential([keras.Input((2,)), layer])  # built on symbolic inputs
    assert layer.seen[1] is True
    with keras.StatelessScope():
        assert internals.in_stateless_scope() and not internals.in_symbolic_scope()
    assert not internals.in_stateless_scope()

"""A prediction's inputs, checked once before anything is traced.

`as_arrays` turns `x` (an array, tensor, or a list/dict of them) into its flat leaves and the
number of examples N; every leaf must be numeric, finite and have a batch axis, and given the
model, the number of inputs and each input's rank and sizes must match the model's inputs.
Errors name the input and the axis.
"""

import keras
import numpy as np
from tfp_bnn import _tf
from tfp_bnn._tf import tf

from tfp_bnn import _keras_internals


def check_model(model):
    """Raises ValueError unless `model` is a built Keras model or layer."""
    if not isinstance(model, keras.Layer):
        raise ValueError(f"`model` must be a Keras model or layer, got {type(model).__name__}.")
    if not getattr(model, "built", True):
        raise ValueError("The model is not built; call it on data or build it first.")


def _expected_inputs(model):
    """The model's inputs as {key: shape} (dict-input models) or [(name, shape)], or None."""
    if model is None:
        return None
    try:
        specs = list(model.inputs)
    except (AttributeError, ValueError, TypeError):
        specs = None
    if specs:
        struct = _keras_internals.inputs_struct(model)
        if isinstance(struct, dict):
            return {key: tuple(struct[key].shape) for key in struct}
        return [(spec.name, tuple(spec.shape)) for spec in specs]
    # A subclassed model's build shape is no contract: its call may take
    # other layouts (the zoo transformer reads [J] or [J, 1] per example).
    return None


def _expected_shapes(inputs, expected):
    """The expected shape of each flattened leaf of `inputs` (None: unknown)."""
    if expected is None:
        return None
    if isinstance(inputs, dict):
        by_key = expected if isinstance(expected, dict) else {
            name: shape for name, shape in expected if name is not None}
        if not by_key:
            return None
        if sorted(inputs) != sorted(by_key):
            raise ValueError(f"`x` has keys {sorted(inputs)} but the model's inputs are "
                             f"{sorted(by_key)}.")
        return [by_key[key] for key in sorted(inputs)]
    if isinstance(expected, dict):
        raise ValueError(f"The model takes a dict of inputs with keys {sorted(expected)}, got "
                         f"{type(inputs).__name__}.")
    return [shape for _, shape in expected]


def _as_leaf(leaf, label):
    if _tf.is_tensor(leaf):
        dtype = leaf.dtype
        if not (dtype.is_floating or dtype.is_integer or dtype.is_bool):
            raise ValueError(f"{label} must hold numbers, got a tensor of dtype {dtype.name}.")
        if len(leaf.shape) == 0:
            raise ValueError(f"{label} needs a batch axis; got a scalar tensor.")
        if dtype.is_floating and not bool(tf.reduce_all(tf.math.is_finite(leaf))):
            row = int(tf.where(~tf.math.is_finite(leaf))[0][0])
            raise ValueError(f"{label} contains NaN or infinite values (first in example {row}).")
        return leaf
    if leaf is None:
        raise ValueError(f"{label} is None; pass an array of examples.")
    if not isinstance(leaf, np.ndarray):
        try:
            leaf = np.asarray(leaf)
        except ValueError:
            raise ValueError(f"{label} is ragged: its rows do not all have the same "
                             "length.") from None
    if leaf.dtype.kind not in "biuf":
        raise ValueError(f"{label} must hold numbers, got dtype {leaf.dtype} (strings, "
                         "None or ragged rows in the data?).")
    if leaf.ndim == 0:
        raise ValueError(f"{label} needs a batch axis; got a scalar {leaf.item()!r}.")
    if leaf.dtype.kind == "f":
        finite = np.isfinite(leaf)
        if not finite.all():
            row = int(np.argwhere(~finite)[0][0])
            raise ValueError(f"{label} contains NaN or infinite values (first in example "
                             f"{row}).")
    return leaf


def _check_shape(label, shape, expected):
    shape = tuple(shape)
    if len(shape) != len(expected):
        raise ValueError(
            f"{label} has shape {shape} (rank {len(shape)}) but the model expects inputs of "
            f"shape {expected} (rank {len(expected)})."
        )
    for axis, (got, want) in enumerate(zip(shape[1:], expected[1:]), start=1):
        if want is not None and got is not None and int(got) != want:
            raise ValueError(
                f"{label} has shape {shape} but the model expects inputs of shape "
                f"{expected}: axis {axis} has size {got}, expected {want}."
            )


def as_arrays(inputs, model=None):
    """The inputs as a nest of arrays/tensors, their flat leaves and their count N.

    Every leaf must be numeric, finite and have a batch axis; given `model`,
    the number of inputs and each input's rank and sizes must match the
    model's inputs (errors say which input and axis). Bad inputs fail here,
    before anything is traced, with a message naming the problem.
    """
    expected = _expected_inputs(model)
    if isinstance(expected, list) and len(expected) == 1 and isinstance(inputs, (list, tuple)) \
            and not any(isinstance(e, np.ndarray) or _tf.is_tensor(e) for e in inputs):
        # A nested list of numbers for a single-input model is one array.
        inputs = _as_leaf(inputs, "`x`")
    shapes = _expected_shapes(inputs, expected)
    leaves = keras.tree.flatten(inputs)
    if not leaves:
        raise ValueError("`x` is empty: no input arrays were given.")
    if len(leaves) == 1:
        labels = ["`x`"]
    elif isinstance(inputs, dict):
        labels = [f"`x[{key!r}]`" for key in sorted(inputs)]
    else:
        labels = [f"input {i} of `x`" for i in range(len(leaves))]
    converted = [_as_leaf(leaf, label) for leaf, label in zip(leaves, labels)]
    counts = {int(leaf.shape[0]) for leaf in converted}
    if len(counts) != 1:
        raise ValueError(
            f"All input arrays must have the same number of examples, got {sorted(counts)}."
        )
    if shapes is not None:
        if len(converted) != len(shapes):
            raise ValueError(f"The model takes {len(shapes)} input array(s), got "
                             f"{len(converted)} in `x`.")
        for leaf, label, shape in zip(converted, labels, shapes):
            _check_shape(label, leaf.shape, shape)
    count = counts.pop()
    if count == 0:
        raise ValueError("`x` has no examples (its first axis has length 0).")
    return keras.tree.pack_sequence_as(inputs, converted), converted, count

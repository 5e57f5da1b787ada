"""TensorFlow, imported where it is first used rather than when tfp_bnn is.

On Keras' JAX backend tfp_bnn runs without TensorFlow installed (a GPU
machine with JAX and CUDA, say): the ported core computes in `keras.ops`
and TFP's JAX substrate, and the modules that still hold a TensorFlow path
import `tf` from here. The name is bound at import; TensorFlow itself loads
on the first attribute read (`tf.function`, `tf.shape`, ...), which on the
TensorFlow backend is at once, as Keras has imported it already.

Module-level statements must not read `tf.` attributes (a decorator, a
constant, a base class), or the import of that module loads TensorFlow:
tests/test__tf.py imports the whole package in a process where TensorFlow
cannot be imported.
"""

import importlib
import sys


class LazyModule:
    """A module imported on the first read of one of its attributes."""

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attribute):
        # Only for names not set in __init__: the module's attributes.
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self):
        return f"<module {self._name!r}, imported on first use>"


tf = LazyModule("tensorflow")
# TFP on TensorFlow, whatever the backend: for code that reads objects a
# TensorFlow program made (the distributions `tfp.layers`' builders return).
# Computations on the active backend take `tfp_bnn._substrate`'s instead.
tfp = LazyModule("tensorflow_probability")


def loaded():
    """Whether TensorFlow is imported in this process (nothing is imported to tell)."""
    return sys.modules.get("tensorflow") is not None


def is_tensor(value):
    """Whether `value` is a TensorFlow tensor; False without loading TensorFlow
    where it is not loaded (then no value can be one)."""
    return loaded() and isinstance(value, tf.Tensor)


__all__ = ["LazyModule", "is_tensor", "loaded", "tf", "tfp"]

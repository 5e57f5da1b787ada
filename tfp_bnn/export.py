"""Exporting models with variational layers as TensorFlow SavedModels.

`model.export(path, format="tf_saved_model")` works as it does for any
Keras model: its `serve` endpoint runs the layers in whatever mode they are
in (sampling, or mean mode after `tfp_bnn.set_mean_mode`), because the
switch is a variable captured in the SavedModel.

`export_saved_model` writes both behaviours side by side, so one artifact
serves stochastic and deterministic requests without touching state:

- `serve(inputs)`: one Monte Carlo forward pass (fresh weight noise per call);
- `serve_mean(inputs)`: the forward pass with every posterior at its mean.

Neither endpoint computes the KL term: serving graphs carry no training
losses. The result loads with `tf.saved_model.load` in a process that does
not import tfp_bnn (the graph uses only core TensorFlow ops).
"""

import os

import keras
import tensorflow as tf

from tfp_bnn.layers.base import forced_mean_trace
from tfp_bnn.layers.base import no_kl_trace


def _input_signature(model):
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError(
            "The model has no known inputs (a subclassed model that was never "
            "built with keras.Input?); pass `input_signature=` explicitly."
        )
    return [tf.TensorSpec(tuple(t.shape), t.dtype, name=t.name) for t in inputs]


def export_saved_model(model, path, input_signature=None):
    """Writes `model` as a SavedModel with `serve` and `serve_mean` endpoints.

    Args:
        model: a built Keras model.
        path: directory to write; must not exist yet (nothing is overwritten).
        input_signature: list of `tf.TensorSpec`; defaults to the model's
            inputs with a free batch dimension.

    Returns:
        `path`.

    Example:
    >>> export_saved_model(model, "/tmp/bnn")
    >>> served = tf.saved_model.load("/tmp/bnn")
    >>> served.serve_mean(x)  # deterministic
    """
    path = os.fspath(path)
    if os.path.exists(path):
        raise ValueError(f"Export path {path!r} already exists; choose a new directory.")
    if not model.built:
        raise ValueError("The model is not built; call it on data or build it first.")
    signature = input_signature or _input_signature(model)
    single = len(signature) == 1

    def _call(args, force_mean):
        with no_kl_trace():
            inputs = args[0] if single else list(args)
            if force_mean:
                with forced_mean_trace():
                    return model(inputs, training=False)
            return model(inputs, training=False)

    def serve(*args):
        return _call(args, force_mean=False)

    def serve_mean(*args):
        return _call(args, force_mean=True)

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", serve, signature)
    archive.add_endpoint("serve_mean", serve_mean, signature)
    archive.write_out(path, verbose=False)
    return path

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

import contextlib
import os
import shutil
import uuid

import keras
import numpy as np
import tensorflow as tf

from tfp_bnn.distributions.classes import class_log_probabilities
from tfp_bnn.layers._tracing import forced_mean_trace
from tfp_bnn.layers._tracing import no_kl_trace


def _check_model(model):
    if not isinstance(model, keras.Layer):
        raise ValueError(f"`model` must be a Keras model, got {type(model).__name__}.")
    if not model.built:
        raise ValueError("The model is not built; call it on data or build it first.")


def _check_new_path(path):
    """The absolute export path; ValueError if it exists or its parent cannot hold it."""
    if not isinstance(path, (str, bytes, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"The export path must be a non-empty str or path, got {path!r}.")
    path = os.path.abspath(os.fsdecode(path))
    if os.path.lexists(path):
        raise ValueError(f"Export path {path!r} already exists; choose a new directory.")
    ancestor = os.path.dirname(path)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ValueError(f"Cannot export to {path!r}: {ancestor!r} is a file, not a "
                         "directory.")
    return path


@contextlib.contextmanager
def _staging_directory(path):
    """Yields a fresh sibling directory of `path`, renamed to `path` on success.

    A failed or interrupted export leaves nothing at `path`: the SavedModel
    is written next to it under a hidden name and moved into place by one
    rename at the end; on error the staging directory (and any parent
    directories created for it) is removed.
    """
    parent = os.path.dirname(path)
    created = []
    head = parent
    while not os.path.isdir(head):
        created.append(head)
        head = os.path.dirname(head)
    staging = os.path.join(parent, f".{os.path.basename(path)}.partial-{uuid.uuid4().hex[:8]}")
    try:
        try:
            os.makedirs(parent, exist_ok=True)
            os.mkdir(staging)  # mode 0o777 & ~umask, like the directory it becomes
        except OSError as error:
            raise ValueError(f"Cannot export to {path!r}: {error.strerror} "
                             f"({error.filename}).") from error
        try:
            yield staging
        except (OSError, tf.errors.OpError) as error:
            raise ValueError(f"Writing the SavedModel to {path!r} failed: {error}") from error
        if os.path.lexists(path):
            raise ValueError(f"Export path {path!r} appeared while the model was being "
                             "written; nothing was overwritten.")
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for directory in created:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise


def _write(archive, path):
    with _staging_directory(path) as staging:
        archive.write_out(staging, verbose=False)


def _input_signature(model):
    """The model's inputs as a signature list: one spec per input, or one dict of them."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError(
            "The model has no known inputs (a subclassed model that was never "
            "built with keras.Input?); pass `input_signature=` explicitly."
        )
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, dict):
        # A dict-input model is called with one dict, so the endpoint takes one.
        return [{key: tf.TensorSpec(tuple(t.shape), t.dtype, name=key)
                 for key, t in struct.items()}]
    return [tf.TensorSpec(tuple(t.shape), t.dtype, name=t.name) for t in inputs]


def export_saved_model(model, path, input_signature=None):
    """Writes `model` as a SavedModel with `serve` and `serve_mean` endpoints.

    Args:
        model: a built Keras model.
        path: directory to write; must not exist yet (nothing is overwritten).
            The SavedModel is written to a hidden sibling directory and
            renamed to `path` at the end, so a failed export leaves nothing.
        input_signature: list of `tf.TensorSpec`; defaults to the model's
            inputs with a free batch dimension.

    Returns:
        `path`.

    Example:
    >>> export_saved_model(model, "/tmp/bnn")
    >>> served = tf.saved_model.load("/tmp/bnn")
    >>> served.serve_mean(x)  # deterministic
    """
    _check_model(model)
    target = _check_new_path(path)
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
    _write(archive, target)
    return path


TASKS = {"regression": ("mean_log_variance", "mean", "distribution"),
         "classification": ("logits", "probabilities", "log_probabilities", "distribution")}


def _check_export_args(model, path, task, output, noise_variance, samples_per_call):
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {tuple(TASKS)}, got {task!r}.")
    _check_model(model)
    if output is None:
        from tfp_bnn.predict import engine  # noqa: PLC0415 - import cycle
        from tfp_bnn.predict.classification import resolve_output  # noqa: PLC0415
        if task == "classification":
            output = resolve_output(model, "auto")
        else:
            output = "distribution" if engine.has_distribution_head(model) else TASKS[task][0]
    if output not in TASKS[task]:
        raise ValueError(f"`output` for task={task!r} must be one of {TASKS[task]}, got {output!r}.")
    if noise_variance is not None:
        if output != "mean":
            raise ValueError("`noise_variance` is only for task='regression', output='mean'.")
        noise_variance = float(noise_variance)
        if not noise_variance > 0 or noise_variance == float("inf"):
            raise ValueError(f"`noise_variance` must be finite and > 0, got {noise_variance!r}.")
    if isinstance(samples_per_call, bool) or not isinstance(samples_per_call, int) or (
        samples_per_call < 1
    ):
        raise ValueError(f"`samples_per_call` must be an int >= 1, got {samples_per_call!r}.")
    target = _check_new_path(path)
    if output != "distribution":
        _check_output_width(model, task, output)
    return output, noise_variance, target


def _check_output_width(model, task, output):
    """The model's last output axis must fit `output`, when it is known before tracing."""
    try:
        outputs = list(model.outputs or [])
    except (AttributeError, ValueError):  # a subclassed model has no symbolic outputs
        return
    if len(outputs) != 1:
        if outputs:
            raise ValueError(f"export_predictive needs a model with a single output, got "
                             f"{len(outputs)}.")
        return
    width = tuple(outputs[0].shape)[-1]
    if width is None:
        return
    if output == "mean_log_variance" and width % 2:
        raise ValueError("output='mean_log_variance' needs an even last axis [means, log "
                         f"variances], got model outputs of shape {tuple(outputs[0].shape)}.")
    if task == "classification" and width < 2:
        raise ValueError(f"A classifier needs >= 2 classes on the last axis, got model outputs "
                         f"of shape {tuple(outputs[0].shape)}.")


class _RunningMoments:
    """Count, mean and sum of squared deviations, merged chunk by chunk (Chan et al. 1979)."""

    @staticmethod
    def merge(state, values, weights):
        count, mean, m2 = state
        w = tf.reshape(weights, [-1] + [1] * (values.shape.rank - 1))
        n = tf.reduce_sum(weights)
        chunk_mean = tf.reduce_sum(w * values, 0) / n
        chunk_m2 = tf.reduce_sum(w * tf.square(values - chunk_mean), 0)
        total = count + n
        delta = chunk_mean - mean
        return (total, mean + delta * (n / total),
                m2 + chunk_m2 + tf.square(delta) * (count * n / total))


def _per_sample(values, num_samples):
    """[S * B, ...] sample-major -> [S, B, ...] float32."""
    values = tf.cast(values, tf.float32)
    return tf.reshape(values, tf.concat([[num_samples, -1], tf.shape(values)[1:]], 0))


def _distribution_terms(task, distribution, num_samples):
    """(means, variances) or log-probabilities [S, B, ...] of a distribution head's output."""
    if task == "regression":
        return (_per_sample(distribution.mean(), num_samples),
                _per_sample(distribution.variance(), num_samples))
    return _per_sample(class_log_probabilities(distribution), num_samples)


def _summaries(task, output, noise_variance, outputs, weights, state):
    """Folds one chunk of outputs [S, B, ...] (weights [S]: 1 = real sample) into `state`.

    For output="distribution", `outputs` holds what `_distribution_terms` returns.
    """
    w = weights[:, tf.newaxis]
    if task == "regression":
        if output == "distribution":
            means, variances = outputs
        elif output == "mean_log_variance":
            means, log_vars = tf.split(tf.cast(outputs, tf.float32), 2, axis=-1)
            variances = tf.exp(log_vars)
        else:
            means = tf.cast(outputs, tf.float32)
            variances = tf.fill(tf.shape(means), noise_variance or 0.0)
        moments = _RunningMoments.merge(state["moments"], means, weights)
        aleatoric = state["aleatoric"] + tf.reduce_sum(
            tf.reshape(weights, [-1] + [1] * (means.shape.rank - 1)) * variances, 0)
        return {"moments": moments, "aleatoric": aleatoric}
    outputs = tf.cast(outputs, tf.float32)
    if output == "logits":
        log_p = tf.nn.log_softmax(outputs)
    elif output == "probabilities":
        log_p = tf.math.log(outputs)
    else:  # log-probabilities, also those of a distribution head
        log_p = outputs
    probs = tf.exp(log_p)
    entropy = -tf.reduce_sum(tf.where(probs > 0, probs * log_p, 0.0), -1)
    w3 = w[..., tf.newaxis] if probs.shape.rank == 3 else tf.reshape(
        weights, [-1] + [1] * (probs.shape.rank - 1))
    return {"probs": state["probs"] + tf.reduce_sum(w3 * probs, 0),
            "entropy": state["entropy"] + tf.reduce_sum(
                tf.reshape(weights, [-1] + [1] * (entropy.shape.rank - 1)) * entropy, 0)}


def export_predictive(model, path, task="regression", output=None, noise_variance=None,
                      samples_per_call=25, input_signature=None):
    """Writes a SavedModel whose `serve` signature returns the Monte Carlo predictive.

    The endpoint takes the inputs and `num_samples` (an int32 scalar chosen
    at call time) and runs the same chunked, loop-free sampling as
    `tfp_bnn.predict`: chunks of `samples_per_call` weight samples inside a
    `tf.while_loop`, with running summaries, so memory does not grow with
    num_samples. It returns, per input:

    - task="regression": "mean", "stddev" (total), "epistemic_variance",
      "aleatoric_variance" (seed 004, eq. 67);
    - task="classification": "probabilities" (mean over samples),
      "predictive_entropy", "expected_entropy", "mutual_information".

    The SavedModel uses only core TensorFlow ops and loads with
    `tf.saved_model.load` in a process that never imports tfp_bnn.

    Args:
        model: a built Keras model with tfp_bnn stochastic layers.
        path: directory to write; must not exist yet. Written to a hidden
            sibling and renamed at the end: a failed export leaves nothing.
        task: "regression" or "classification".
        output: what the model outputs, as in `tfp_bnn.predict.regression`
            ("mean_log_variance", "mean" or "distribution") and
            `tfp_bnn.predict.classification` ("logits", "probabilities",
            "log_probabilities" or "distribution"). None (the default)
            reads it from the model as their output="auto" does: a
            distribution head (`tfp_bnn.layers.IndependentNormal`,
            `Categorical`, ...) is served through its distribution's mean
            and variance, or its class probabilities.
        noise_variance: homoscedastic noise variance for output="mean".
        samples_per_call: weight samples per step of the loop.
        input_signature: list of `tf.TensorSpec`; default: the model's inputs.

    Returns:
        `path`.

    Example:
    >>> export_predictive(model, "/tmp/bnn_predictive", task="classification")
    >>> served = tf.saved_model.load("/tmp/bnn_predictive")
    >>> served.serve(x, tf.constant(100))["mutual_information"]
    """
    from tfp_bnn.predict.engine import MonteCarloRunner  # noqa: PLC0415 - import cycle

    output, noise_variance, target = _check_export_args(
        model, path, task, output, noise_variance, samples_per_call)
    signature = list(input_signature or _input_signature(model))
    single = len(signature) == 1
    runner = MonteCarloRunner(model)
    chunk = samples_per_call

    def predictive(*args):
        *inputs, num_samples = args
        inputs = inputs[0] if single else list(inputs)
        num_samples = tf.convert_to_tensor(num_samples, tf.int32)
        check = tf.debugging.assert_greater_equal(
            num_samples, 1, message="num_samples must be >= 1")
        with tf.control_dependencies([check]):
            steps = (num_samples + chunk - 1) // chunk
        def chunk_outputs():
            draws = runner._draw(chunk)
            if output == "distribution":
                return _distribution_terms(
                    task, runner._distribution_impl(inputs, draws, chunk), chunk)
            return runner._call_impl(inputs, draws, chunk)

        first = chunk_outputs()
        shape = tf.shape(tf.nest.flatten(first)[0])[1:]
        if task == "regression":
            half = shape if output == "distribution" else shape[:-1] if output == "mean" \
                else tf.concat([shape[:-1], shape[-1:] // 2], 0)
            zeros = tf.zeros(half)
            state = {"moments": (tf.constant(0.0), zeros, zeros), "aleatoric": zeros}
        else:
            state = {"probs": tf.zeros(shape), "entropy": tf.zeros(shape[:-1])}

        def weights_for(step):
            valid = tf.minimum(chunk, num_samples - step * chunk)
            return tf.cast(tf.range(chunk) < valid, tf.float32)

        state = _summaries(task, output, noise_variance, first, weights_for(0), state)

        def body(step, state):
            outputs = chunk_outputs()
            return step + 1, _summaries(task, output, noise_variance, outputs,
                                        weights_for(step), state)

        _, state = tf.while_loop(lambda step, _: step < steps, body, (tf.constant(1), state))
        total = tf.cast(num_samples, tf.float32)
        if task == "regression":
            _, mean, m2 = state["moments"]
            epistemic = m2 / total
            aleatoric = state["aleatoric"] / total
            return {"mean": mean, "stddev": tf.sqrt(epistemic + aleatoric),
                    "epistemic_variance": epistemic, "aleatoric_variance": aleatoric}
        probs = state["probs"] / total
        expected = state["entropy"] / total
        log_probs = tf.math.log(tf.maximum(probs, np.finfo(np.float32).tiny))
        entropy = -tf.reduce_sum(tf.where(probs > 0, probs * log_probs, 0.0), -1)
        return {"probabilities": probs, "predictive_entropy": entropy,
                "expected_entropy": expected,
                "mutual_information": tf.maximum(entropy - expected, 0.0)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serve", predictive,
        signature + [tf.TensorSpec([], tf.int32, name="num_samples")])
    _write(archive, target)
    return path

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

Serving raw data: a model trained on standardised inputs and targets expects
standardised rows and answers in standardised units. Wrap it first with
`with_preprocessing(model, x_mean=..., x_std=..., y_mean=..., y_std=...)`
(the training split's statistics): the wrapped model standardises the raw
inputs itself (`keras.layers.Normalization`) and maps its predictions back
to the target's units (`tfp_bnn.layers.TargetScaling`), so its `.keras` file
and the `serve(x_raw, num_samples)` of `export_predictive(wrapped, ...)` take
raw rows and return the mean, standard deviation and variances in the data's
units. `python -m zoo train` exports its models this way.

SavedModels are a TensorFlow-backend feature: on JAX both functions raise
at once, naming the way across (a `.keras` file loaded under TensorFlow).
"""

import keras
from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn import _keras_internals
from tfp_bnn import _predictive
from tfp_bnn import _validation as check
from tfp_bnn._data_units import with_preprocessing  # noqa: F401 - public here
from tfp_bnn._export_files import check_new_path
from tfp_bnn._export_files import write
from tfp_bnn.layers._tracing import forced_mean_trace
from tfp_bnn.layers._tracing import no_kl_trace
from tfp_bnn.predict import engine
from tfp_bnn.predict.classification import resolve_output
from tfp_bnn.predict.limits import MAX_NUM_SAMPLES
from tfp_bnn.predict.limits import MAX_ROWS_PER_CALL
from tfp_bnn.predict.limits import check_draws
from tfp_bnn.predict.limits import check_multiple

TASKS = _predictive.TASKS


def _require_tensorflow_backend(name):
    """SavedModels trace the layers into TensorFlow graphs: TensorFlow backend only."""
    if _backend.is_jax():
        raise RuntimeError(
            f"tfp_bnn.export.{name} writes a TensorFlow SavedModel and runs on Keras' "
            "TensorFlow backend only; on JAX save the model with model.save('model.keras') "
            "and export it from a process with KERAS_BACKEND=tensorflow.")


def _input_signature(model):
    """The model's inputs as a signature list: one spec per input, or one dict of them."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError(
            "The model has no known inputs (a subclassed model that was never "
            "built with keras.Input?); pass `input_signature=` explicitly."
        )
    struct = _keras_internals.inputs_struct(model)
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
    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> x = np.random.rand(2, 4).astype("float32")
    >>> path = export_saved_model(model, os.path.join(tempfile.mkdtemp(), "bnn"))
    >>> served = tf.saved_model.load(path)
    >>> served.serve_mean(x).shape   # deterministic: the posterior means
    TensorShape([2, 3])
    """
    _require_tensorflow_backend("export_saved_model")
    engine.check_model(model)
    target = check_new_path(path)
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
    write(archive, target)
    return path


def _check_export_args(model, path, task, output, noise_variance, samples_per_call):
    check.one_of("task", task, TASKS)
    engine.check_model(model)
    if output is None:
        if task == "classification":
            output = resolve_output(model, "auto")
        else:
            output = "distribution" if engine.has_distribution_head(model) else TASKS[task][0]
    if output not in TASKS[task]:
        raise ValueError(f"`output` for task={task!r} must be one of {TASKS[task]}, "
                         f"got {output!r}.")
    if noise_variance is not None:
        if output != "mean":
            raise ValueError("`noise_variance` is only for task='regression', output='mean'.")
        noise_variance = check.positive("noise_variance", noise_variance)
    samples_per_call = check_multiple(
        "samples_per_call",
        check.integer("samples_per_call", samples_per_call, maximum=MAX_NUM_SAMPLES),
        engine.sample_multiple(model))
    check_draws(engine.MonteCarloRunner(model).layers, samples_per_call)
    target = check_new_path(path)
    if output != "distribution":
        _check_output_width(model, task, output)
    return output, noise_variance, samples_per_call, target


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


def _predictive_function(model, task, output, noise_variance, chunk, single):
    """The served predictive: chunks of `chunk` weight samples folded in a `tf.while_loop`.

    Each step runs `MonteCarloRunner.sampled_outputs` (the draws and model call that
    `tfp_bnn.predict` traces) and reads them with `tfp_bnn._predictive`; the samples past
    `num_samples` in the last chunk get weight 0.
    """
    runner = engine.MonteCarloRunner(model)
    regression = task == "regression"
    multiple = engine.sample_multiple(model)

    def chunk_terms(inputs, step, num_samples):
        weights = tf.cast(tf.range(chunk) < num_samples - step * chunk, tf.float32)
        outputs = runner.sampled_outputs(inputs, chunk, distribution=output == "distribution")
        if not regression:
            return _predictive.class_log_probs(outputs, output, chunk, tf.float32), weights
        means, variances = _predictive.regression_terms(outputs, output, chunk, tf.float32)
        if variances is None:
            variances = tf.fill(tf.shape(means), noise_variance or 0.0)
        return means, variances, weights

    def merge(state, terms):
        if not regression:
            probs, entropy = _predictive.class_sums(*terms)
            return state[0] + probs, state[1] + entropy
        means, variances, weights = terms
        return (_predictive.merge_moments(state[0], means, weights),
                state[1] + _predictive.weighted_sum(variances, weights))

    def predictive(*args):
        *inputs, num_samples = args
        inputs = inputs[0] if single else list(inputs)
        num_samples = tf.convert_to_tensor(num_samples, tf.int32)
        # Checked before any draw: past the limit, `num_samples + chunk - 1` below
        # would also wrap around in int32 and end the loop early, silently.
        samples_text = (f"`num_samples` must be an int in 1..{MAX_NUM_SAMPLES:,} (the limit "
                        "of tfp_bnn.predict)")
        rows = tf.cast(tf.shape(tf.nest.flatten(inputs)[0])[0], tf.int64) * chunk
        checks = [
            tf.debugging.assert_greater_equal(num_samples, 1, message=samples_text),
            tf.debugging.assert_less_equal(num_samples, MAX_NUM_SAMPLES, message=samples_text),
            tf.debugging.assert_less_equal(
                rows, tf.constant(MAX_ROWS_PER_CALL, tf.int64),
                message=f"the inputs tiled `samples_per_call` = {chunk:,} times must be at "
                        f"most {MAX_ROWS_PER_CALL:,} rows per step: serve at most "
                        f"{MAX_ROWS_PER_CALL // chunk:,} inputs per call")]
        if multiple > 1:  # a deep ensemble: whole rounds of its M members
            checks.append(tf.debugging.assert_equal(
                num_samples % multiple, 0,
                message=f"num_samples must be a multiple of {multiple} (the ensemble's members)"))
        with tf.control_dependencies(checks):  # no draw or tiling runs before them
            num_samples = tf.identity(num_samples)
            inputs = tf.nest.map_structure(tf.identity, inputs)
        steps = (num_samples + chunk - 1) // chunk
        first = chunk_terms(inputs, 0, num_samples)
        zeros = tf.zeros_like(first[0][0])
        state = ((tf.constant(0.0), zeros, zeros), zeros) if regression else (
            zeros, tf.zeros_like(zeros[..., 0]))
        state = merge(state, first)
        _, state = tf.while_loop(
            lambda step, _: step < steps,
            lambda step, state: (step + 1, merge(state, chunk_terms(inputs, step, num_samples))),
            (tf.constant(1), state))
        total = tf.cast(num_samples, tf.float32)
        if regression:
            (_, mean, m2), aleatoric = state
            return _predictive.regression_summaries(mean, m2 / total, aleatoric / total)
        return _predictive.classification_summaries(state[0] / total, state[1] / total)

    return predictive


def export_predictive(model, path, task="regression", output=None, noise_variance=None,
                      samples_per_call=25, input_signature=None):
    """Writes a SavedModel whose `serve` signature returns the Monte Carlo predictive.

    The endpoint takes the inputs and `num_samples` (an int32 scalar chosen
    at call time, in 1..1,000,000 as in `tfp_bnn.predict`; outside it the
    call raises `tf.errors.InvalidArgumentError` before any sample) and runs the same chunked, loop-free sampling as
    `tfp_bnn.predict`: chunks of `samples_per_call` weight samples inside a
    `tf.while_loop`, with running summaries, so memory does not grow with
    num_samples. It returns, per input:

    - task="regression": "mean", "stddev" (total), "epistemic_variance",
      "aleatoric_variance" (Kendall and Gal 2017);
    - task="classification": "probabilities" (mean over samples),
      "predictive_entropy", "expected_entropy", "mutual_information";

    the same names and the same per-chunk math as `summaries()` of the
    predictions `tfp_bnn.predict` returns (see `tfp_bnn._predictive`).

    The SavedModel uses only core TensorFlow ops and loads with
    `tf.saved_model.load` in a process that never imports tfp_bnn.

    Args:
        model: a built Keras model with tfp_bnn stochastic layers; wrapped by
            `with_preprocessing`, the endpoint takes raw inputs and its
            summaries are in the target's units.
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
        samples_per_call: weight samples per step of the loop, at most
            1,000,000 (the `num_samples` limit of `tfp_bnn.predict`) and as
            many as the model's weight samples fit in half the machine's
            memory; a call's inputs tiled this many times are at most
            4,194,304 rows (the per-call limit of `tfp_bnn.predict`).
        input_signature: list of `tf.TensorSpec`; default: the model's inputs.

    Returns:
        `path`.

    Example:
    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> x = np.random.rand(2, 4).astype("float32")
    >>> path = os.path.join(tempfile.mkdtemp(), "bnn_predictive")
    >>> path = export_predictive(model, path, task="classification", output="logits",
    ...                          samples_per_call=10)
    >>> served = tf.saved_model.load(path)
    >>> served.serve(x, tf.constant(100))["mutual_information"].shape
    TensorShape([2])
    """
    _require_tensorflow_backend("export_predictive")
    output, noise_variance, samples_per_call, target = _check_export_args(
        model, path, task, output, noise_variance, samples_per_call)
    signature = list(input_signature or _input_signature(model))
    predictive = _predictive_function(model, task, output, noise_variance, samples_per_call,
                                      single=len(signature) == 1)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serve", predictive,
        signature + [tf.TensorSpec([], tf.int32, name="num_samples")])
    write(archive, target)
    return path

"""The accelerator-readiness audit of the zoo's hot paths (figures in BENCHMARKS.md).

Every zoo model's train step, the Monte Carlo engine of `tfp_bnn.predict` on
it, and the transformer's moment path (diagonal and full covariance) go
through `tfp_bnn.testing.accelerator_audit.audit_function`: each op must
have a GPU kernel for its dtypes, be a named host op, or sit in an XLA
cluster, and each path must lower to XLA.

    python -m zoo.experiments.accelerator_audit     one line per path

Example:
>>> reports = audit(models=["flipout_mlp"], xla=False, moments_full=False)
>>> reports["train_step[flipout_mlp]"].fallback
{}
"""

import inspect

import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _keras_internals
from tfp_bnn.predict.engine import runner_for
from tfp_bnn.testing.accelerator_audit import audit_function
from tfp_bnn.testing.accelerator_audit import summary
from zoo.models import registry
from zoo.models import transformer as transformer_models


def _forward(model):
    return tf.function(lambda inputs: model(inputs, training=False))


def _case(spec):
    """(input_shape, task, num_classes) of one zoo model's audit.

    Models taking images classify them (conv and softmax cross-entropy ops),
    regression-only models read a table (Gaussian NLL), the transformer a
    sequence of scalar tokens (its moment path).
    """
    if "sequence" in spec.inputs and "image" not in spec.inputs:
        return (8, 1), "regression", None
    if "image" in spec.inputs and "classification" in spec.tasks:
        return (8, 8, 1), "classification", 3
    return (8,), "regression", None


# Smaller than the defaults, with every op type of them: one hidden layer,
# a 2-step flow. Tracing cost grows with the layer count, not the widths.
_SMALL = {"hidden_units": (8,), "flow_length": 2, "num_members": 2}  # 2 samples: 1 per member


def _small_overrides(builder):
    accepted = inspect.signature(builder).parameters
    return {key: value for key, value in _SMALL.items() if key in accepted}


def _batch(input_shape, task, rows=4):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(rows,) + input_shape), tf.float32)
    if task == "classification":
        return x, tf.constant(rng.integers(0, 3, size=rows), tf.int32)
    return x, tf.constant(rng.normal(size=(rows, 1)), tf.float32)


def _train_step_report(model, x, y, name, xla):
    # The function Keras' fit runs per step (one_step_on_data), with the
    # optimizer built first so that tracing creates no variables.
    model.optimizer.build(model.trainable_variables)
    step = tf.function(model.train_step, jit_compile=False)
    report = audit_function(step, ((x, y),), name, xla=xla)
    report.jit_blockers = tuple(layer.name for layer in _keras_internals.flatten_layers(model)
                                if not layer.supports_jit)
    return report


def _predict_reports(model, x, label, xla):
    runner = runner_for(model)
    samples = 2
    reports = [audit_function(runner.traced_draw, (samples,), f"predict.draw[{label}]", xla=xla)]
    draws = runner.draw(samples)
    # The default runner's call; with `xla` its python function is traced
    # once under jit_compile=True, the path of `tfp_bnn.predict.*(...,
    # jit_compile=True)`.
    reports.append(audit_function(runner.traced_call, (x, draws, samples),
                                  f"predict.call[{label}]", xla=xla))
    return reports


def audit(models=None, xla=True, moments_full=True):
    """Audits the hot paths of the zoo models, the predict engine and the moment path.

    Args:
        models: zoo model names (default: all of `registry.list_models()`).
        xla: also lower each path to HLO for the XLA GPU backend.
        moments_full: also audit a transformer on the full-covariance moment
            path (the zoo model uses the diagonal one).

    Returns:
        {path name: PathReport}, with paths "train_step[<model>]",
        "predict.draw[<model>]" and "predict.call[<model>]" (models with
        Monte Carlo prediction), "moments.forward[bayesian_transformer]",
        and with `moments_full` "train_step[moments_full]" and
        "moments.forward[moments_full]".

    Raises:
        ValueError: for an unknown model name.
    """
    names = registry.list_models() if models is None else list(models)
    specs = [registry.get_spec(name) for name in names]  # unknown names fail here
    reports = {}

    def add(report):
        reports[report.name] = report

    for spec in specs:
        input_shape, task, num_classes = _case(spec)
        model = registry.build_model(spec.name, input_shape, task=task, num_classes=num_classes,
                                num_train=100, seed=0, **_small_overrides(spec.builder))
        x, y = _batch(input_shape, task)
        add(_train_step_report(model, x, y, f"train_step[{spec.name}]", xla))
        if spec.sampling_free:
            add(audit_function(_forward(model), (x,), f"moments.forward[{spec.name}]", xla=xla))
        else:
            for report in _predict_reports(model, x, spec.name, xla):
                add(report)
    if moments_full:
        model = transformer_models.build(4, "moments", mode="full", width=8, num_heads=2,
                                         ff_dim=8, pooling="last", horizon=2)
        x = tf.constant(np.random.default_rng(1).normal(size=(3, 4)), tf.float32)
        y = tf.constant(np.random.default_rng(2).normal(size=(3, 2)), tf.float32)
        add(_train_step_report(model, x, y, "train_step[moments_full]", xla))
        add(audit_function(_forward(model), (x,), "moments.forward[moments_full]", xla=xla))
    return reports


if __name__ == "__main__":
    print(summary(audit()))

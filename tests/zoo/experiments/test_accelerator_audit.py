"""Accelerator readiness (issue 16): no hot-path op falls back to the CPU, XLA compiles.

The module-scoped audit traces every zoo model's train step, the predict
engine's draw and call, and the moment path once (see
`zoo.experiments.accelerator_audit`); tests/testing/test_accelerator_audit.py
checks that the audit itself finds fallbacks where they are.
"""

import pytest

import zoo
from tfp_bnn.testing.accelerator_audit import summary
from zoo.experiments import accelerator_audit

MODELS = zoo.list_models()
MONTE_CARLO = [name for name in MODELS if not zoo.get_spec(name).sampling_free]
SAMPLING_FREE = [name for name in MODELS if zoo.get_spec(name).sampling_free]


@pytest.fixture(scope="module")
def reports():
    return accelerator_audit.audit()


def _assert_ready(report, min_ops=1):
    assert report.fallback == {}, f"{report.name} falls back to the CPU: {report.fallback}"
    assert report.xla_error is None, f"{report.name} does not compile with XLA: " \
                                     f"{report.xla_error}"
    assert report.xla_gpu_missing == (), report.name
    assert len(report.op_types) >= min_ops, (report.name, report.op_types)


@pytest.mark.parametrize("name", MODELS)
def test_train_step_runs_on_an_accelerator_and_compiles_with_xla(reports, name):
    report = reports[f"train_step[{name}]"]
    # A train step holds at least the forward, gradient and Adam ops.
    _assert_ready(report, min_ops=30)
    assert {"MatMul", "AssignVariableOp"} <= set(report.op_types)
    assert report.jit_blockers == ()


@pytest.mark.parametrize("name", MONTE_CARLO)
def test_predict_engine_runs_on_an_accelerator_and_compiles_with_xla(reports, name):
    draw, call = reports[f"predict.draw[{name}]"], reports[f"predict.call[{name}]"]
    _assert_ready(draw, min_ops=0)
    _assert_ready(call, min_ops=5)
    # Weight samples come from seeded stateless RNG ops (uniforms through
    # erfinv), not the stateful RandomStandardNormal / RandomUniform, whose
    # stream is hidden per-device state.
    # (Models without variational layers draw nothing.)
    if draw.op_types:
        assert "StatelessRandomUniformV2" in draw.op_types, draw.op_types
    assert not {"RandomStandardNormal", "RandomUniform"} & set(draw.op_types + call.op_types)


@pytest.mark.parametrize("path", [f"moments.forward[{n}]" for n in SAMPLING_FREE]
                         + ["moments.forward[moments_full]", "train_step[moments_full]"])
def test_moment_path_runs_on_an_accelerator_and_compiles_with_xla(reports, path):
    _assert_ready(reports[path], min_ops=10)


def test_every_hot_path_is_audited(reports):
    expected = ({f"train_step[{n}]" for n in MODELS}
                | {f"predict.{kind}[{n}]" for n in MONTE_CARLO for kind in ("draw", "call")}
                | {f"moments.forward[{n}]" for n in SAMPLING_FREE}
                | {"train_step[moments_full]", "moments.forward[moments_full]"})
    assert set(reports) == expected
    print("\n" + summary(reports))


def test_unknown_model_is_refused_by_name():
    with pytest.raises(ValueError, match="no_such_model"):
        accelerator_audit.audit(models=["no_such_model"])

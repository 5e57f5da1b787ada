"""Accelerator readiness (issue 16): no hot-path op falls back to the CPU, XLA compiles.

The module-scoped audit traces every zoo model's train step, the predict
engine's draw and call, and the moment path once (see
`tfp_bnn.testing.accelerator_audit`); the hostile cases check that the
audit finds fallbacks where they are.
"""

import pytest
import tensorflow as tf

import zoo
from tfp_bnn.testing import accelerator_audit

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
    print("\n" + accelerator_audit.summary(reports))


# -- hostile cases: the audit must find what falls back --------------------------
def _audit(function, *args, xla=True):
    return accelerator_audit.audit_function(function, args, "hostile", xla=xla)


def test_print_inside_a_while_body_is_found_in_the_function_library():
    @tf.function
    def loop(x):
        def body(i, x):
            tf.print("step", i)
            return i + 1, x * 2.0
        return tf.while_loop(lambda i, x: i < 3, body, (0, x))[1]

    report = _audit(loop, tf.ones([2]))
    assert {"PrintV2", "StringFormat"} <= set(report.fallback)
    assert "no GPU kernel" in report.fallback["PrintV2"]
    assert report.xla_error is not None
    assert {"PrintV2", "StringFormat"} <= set(report.xla_gpu_missing)
    assert "AddV2" in report.op_types and "AddV2" not in report.xla_gpu_missing


def test_py_function_is_a_fallback_although_it_has_a_default_kernel():
    @tf.function
    def f(x):
        return tf.py_function(lambda t: t * 2.0, [x], tf.float32)

    report = _audit(f, tf.ones([2]), xla=False)
    assert list(report.fallback) == ["EagerPyFunc"]
    assert report.xla_error == "not checked"


def test_a_dtype_without_a_gpu_kernel_is_a_fallback():
    @tf.function
    def f(a):
        return tf.linalg.matmul(a, a)  # MatMul has GPU kernels for floats only

    report = _audit(f, tf.ones([2, 2], tf.int32), xla=False)
    assert report.fallback == {"MatMul": "no GPU kernel for dtypes ['int32']"}
    floats = _audit(f, tf.ones([2, 2]), xla=False)
    assert floats.fallback == {} and "MatMul" in floats.op_types


def test_an_op_without_gpu_kernel_is_accepted_only_inside_an_xla_cluster():
    def truncated(x):
        return x + tf.random.stateless_parameterized_truncated_normal(
            [2], [1, 2], means=0.0, stddevs=1.0, minvals=-1.0, maxvals=1.0)

    jitted = tf.function(truncated, jit_compile=True)
    nested = _audit(tf.function(lambda x: jitted(x) * 2.0), tf.ones([2]))
    assert nested.fallback == {}
    assert nested.xla_only == ("StatelessParameterizedTruncatedNormal",)
    assert nested.xla_error is None
    plain = _audit(tf.function(truncated), tf.ones([2]), xla=False)
    assert list(plain.fallback) == ["StatelessParameterizedTruncatedNormal"]
    assert plain.xla_only == ()


def test_allowlisted_default_kernel_ops_are_host_side_others_are_flagged():
    x = tf.Variable(tf.ones([2, 3]))

    @tf.function
    def gradient(b):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(x * b)
        return tape.gradient(y, x)

    report = _audit(gradient, tf.ones([3]), xla=False)
    assert report.fallback == {}
    assert {"ReadVariableOp", "Placeholder"} <= set(report.host)
    assert "Mul" in report.op_types and "Mul" not in report.host

    @tf.function
    def checked(b):
        return tf.ensure_shape(b, [3]) * 2.0  # EnsureShape: CPU and DEFAULT kernels only

    flagged = _audit(checked, tf.ones([3]), xla=False)
    assert list(flagged.fallback) == ["EnsureShape"]
    assert flagged.fallback["EnsureShape"].startswith("no GPU kernel (kernels: CPU, DEFAULT")


def test_unknown_model_is_refused_by_name():
    with pytest.raises(ValueError, match="no_such_model"):
        accelerator_audit.audit(models=["no_such_model"])

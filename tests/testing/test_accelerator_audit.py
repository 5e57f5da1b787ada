"""The accelerator audit finds what would fall back to the CPU (hostile cases).

Each case traces a small function with an op that has no GPU kernel for its
dtype, or is only host-side, and checks the audit's verdict; the audit of the
zoo's own paths is tested in tests/zoo/experiments/test_accelerator_audit.py.
"""

import tensorflow as tf

from tfp_bnn.testing import accelerator_audit


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

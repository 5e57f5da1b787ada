"""Accelerator-readiness audit: would the hot paths run on a GPU or TPU?

Runs without a GPU. Each hot path (a model's train step, the Monte
Carlo engine of `tfp_bnn.predict`, the moment-propagation path) is traced
to a concrete graph; every node, including those in the function library
(while/cond bodies, nested tf.functions, gradient functions), is looked up
in TensorFlow's kernel registry, which lists the kernels of every device
type even in a CPU-only build. A node is

- "gpu": a GPU kernel accepts its dtypes (or, for an op with GPU kernels,
  a device-agnostic DEFAULT kernel does, as for int32 Const);
- "xla": no such kernel, but the node is inside an XLA cluster (a
  function compiled with jit_compile=True), where XLA, not the kernel
  registry, decides;
- "host": no such kernel, but an op in the explicit allowlist `HOST_OPS`
  (control flow, function calls, variable reads, shape bookkeeping, input
  pipeline), each with its reason;
- a fallback: anything else, which would make TF copy to the CPU and back.

Each path is also lowered to HLO (`tf.function(jit_compile=True)
.experimental_get_compiler_ir(...)(stage="hlo")`), which fails on any op
TF2XLA cannot compile: the jit_compile=True and TPU path. The lowering runs
for XLA_CPU_JIT (`platform_name="GPU"` refuses variables without a GPU
device), so every op type is also looked up among the XLA_GPU_JIT
registrations, which a CPU build has. A CPU build has no XLA_TPU_JIT
registrations; the TPU backend uses the same TF2XLA kernels.

This module audits any traced function (`audit_function`); the audit of
the zoo's own paths, whose figures are in BENCHMARKS.md, is
`zoo.experiments.accelerator_audit`.

Example:
>>> step = tf.function(lambda x: tf.nn.relu(x) * 2.0)
>>> audit_function(step, (tf.ones((2, 3)),), "relu").fallback
{}
"""

import dataclasses
import functools

from tfp_bnn._tf import tf
from tensorflow.python.framework import kernels
from tensorflow.python.framework import op_def_registry

# Ops without a GPU kernel that TensorFlow handles on any device (through a
# device-agnostic DEFAULT kernel, with small int32 shapes in host memory) or
# on the host by design; none moves the math off the accelerator. Any other
# op without a GPU kernel is a fallback, so a new one must be reviewed here.
HOST_OPS = {
    "NoOp": "control dependencies only",
    "Placeholder": "graph input, fed by the caller",
    "_Arg": "function argument", "_Retval": "function result",
    "Identity": "forwards its input", "IdentityN": "forwards its inputs (custom gradients)",
    "PartitionedCall": "function call; its body is audited itself",
    "StatefulPartitionedCall": "function call; its body is audited itself",
    "While": "control flow; cond and body audited themselves",
    "StatelessWhile": "control flow; cond and body audited themselves",
    "If": "control flow; branches audited themselves",
    "StatelessIf": "control flow; branches audited themselves",
    "ReadVariableOp": "reads a resource variable on the variable's device",
    "AssignVariableOp": "writes a resource variable on the variable's device",
    "VarIsInitializedOp": "variable bookkeeping on first use; no math",
    "BroadcastGradientArgs": "gradient shape bookkeeping on small int32 shapes (host memory)",
    "ConcatOffset": "gradient shape bookkeeping on small int32 shapes (host memory)",
    "InvertPermutation": "transpose-gradient permutation, a few int32s (host memory)",
    "IteratorGetNext": "input pipeline: tf.data runs on the host and prefetches",
    "IteratorGetNextAsOptional": "input pipeline (Keras' multi-step loop), host by design",
}
# Ops that run on a GPU device but pin inputs in host memory, so each step
# copies device -> host and synchronises: fallbacks whatever the registry says.
HOST_ROUND_TRIPS = {
    "EagerPyFunc": "tf.py_function runs Python on the host (device -> host -> device copies)",
    "Assert": "reads its condition in host memory (a device -> host copy and sync per step)",
}


@dataclasses.dataclass
class PathReport:
    """The audit of one traced hot path.

    Attributes:
        name: the path, e.g. "train_step[flipout_mlp]" or "predict.call[bbb_mlp]".
        op_types: every op type in the graph and its function library, sorted.
        fallback: {op_type: reason} for ops that would fall back to the CPU.
        xla_only: op types without a GPU kernel that sit in an XLA cluster.
        host: op types without a GPU kernel, allowed by `HOST_OPS`.
        xla_error: None if the path lowers to HLO, else the error's first
            line; "not checked" if skipped.
        xla_gpu_missing: op types with no XLA_GPU_JIT kernel (what
            jit_compile=True on a GPU would refuse); checked with `xla`.
        jit_blockers: (train steps) layers with `supports_jit=False`, which
            make Keras' jit_compile="auto" (XLA on a GPU machine) fall back
            to plain TF.
    """

    name: str
    op_types: tuple
    fallback: dict
    xla_only: tuple
    host: tuple
    xla_error: object = "not checked"
    xla_gpu_missing: tuple = ()
    jit_blockers: tuple = ()


def _attr_value(node, name, op_def):
    if name in node.attr:
        return node.attr[name]
    for attr in op_def.attr if op_def is not None else ():
        if attr.name == name and attr.HasField("default_value"):
            return attr.default_value
    return None


def _kernel_accepts(kernel, node, op_def) -> bool:
    """True if every type constraint of `kernel` admits the node's attrs."""
    for constraint in kernel.constraint:
        allowed = set(constraint.allowed_values.list.type)
        value = _attr_value(node, constraint.name, op_def)
        if value is None:
            return False
        types = list(value.list.type) if value.HasField("list") else [value.type]
        if not set(types) <= allowed:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _registered(op_type):
    # The registry answer is a parsed protobuf: cache it, graphs repeat op types.
    return tuple(kernels.get_registered_kernels_for_op(op_type).kernel)


def accelerator_kernel(node) -> str:
    """"" if a GPU kernel accepts `node` (a NodeDef) and its dtypes, else why not."""
    registered = _registered(node.op)
    if not any(k.device_type == "GPU" for k in registered):
        devices = sorted({k.device_type for k in registered}) or ["none"]
        return f"no GPU kernel (kernels: {', '.join(devices)})"
    # An op with GPU kernels may serve some dtypes (int32 Const, Identity, ...)
    # through device-agnostic DEFAULT kernels, which TF uses on a GPU.
    candidates = [k for k in registered if k.device_type in ("GPU", "DEFAULT")]
    op_def = op_def_registry.get(node.op)
    if any(_kernel_accepts(kernel, node, op_def) for kernel in candidates):
        return ""
    dtypes = sorted(tf.dtypes.as_dtype(value.type).name for key, value in node.attr.items()
                    if value.WhichOneof("value") == "type")
    return f"no GPU kernel for dtypes {dtypes}"


def classify(node):
    """("gpu" | "host" | "fallback", reason) for one NodeDef outside an XLA cluster."""
    if node.op in HOST_ROUND_TRIPS:
        return "fallback", HOST_ROUND_TRIPS[node.op]
    reason = accelerator_kernel(node)
    if not reason:
        return "gpu", ""
    if node.op in HOST_OPS:
        return "host", HOST_OPS[node.op]
    return "fallback", reason


def _called_functions(node, library):
    """Names of the library functions `node` calls (as its op or through func attrs)."""
    names = {node.op} & library
    for value in node.attr.values():
        if value.HasField("func"):
            names.add(value.func.name)
        names.update(func.name for func in value.list.func)
    return names & library


def _must_compile(attrs) -> bool:
    return "_XlaMustCompile" in attrs and attrs["_XlaMustCompile"].b


def audit_graph(graph_def, name, root_in_xla=False) -> PathReport:
    """Classifies every node of `graph_def` and its function library (see module doc)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    library = set(functions)
    # Functions in an XLA cluster: those marked _XlaMustCompile, those called
    # by a marked node, and everything they call in turn.
    xla = {n for n, f in functions.items() if _must_compile(f.attr)}
    for node in graph_def.node:
        if root_in_xla or _must_compile(node.attr):
            xla |= _called_functions(node, library)
    for node in (n for f in functions.values() for n in f.node_def):
        if _must_compile(node.attr):
            xla |= _called_functions(node, library)
    pending = list(xla)
    while pending:
        for node in functions[pending.pop()].node_def:
            for callee in _called_functions(node, library) - xla:
                xla.add(callee)
                pending.append(callee)
    groups = [(graph_def.node, root_in_xla)]
    groups += [(f.node_def, fname in xla) for fname, f in functions.items()]
    op_types, fallback, xla_only, host = set(), {}, set(), set()
    for nodes, in_xla in groups:
        for node in nodes:
            if node.op in library:  # a call of a library function, audited itself
                continue
            op_types.add(node.op)
            kind, reason = classify(node)
            if kind == "gpu":
                continue
            if in_xla:
                xla_only.add(node.op)
            elif kind == "host":
                host.add(node.op)
            else:
                fallback.setdefault(node.op, reason)
    # An op type that sometimes falls back is a fallback, even if elsewhere in XLA.
    return PathReport(name, tuple(sorted(op_types)), fallback,
                      tuple(sorted(xla_only - set(fallback))), tuple(sorted(host)))


def audit_function(function, args, name, xla=True) -> PathReport:
    """Audits `function` (a tf.function) traced on `args` (a tuple of concrete values).

    The graph is classified as the function's own jit_compile setting places
    it. With `xla`, one trace under jit_compile=True serves both the walk
    (tracing does not depend on jit_compile) and the lowering to HLO; any
    lowering error is recorded in `xla_error`.
    """
    jit = bool(getattr(function, "_jit_compile", False))
    traced = function
    if xla and not jit:
        traced = tf.function(function.python_function, jit_compile=True)
    concrete = traced.get_concrete_function(*args)
    report = audit_graph(concrete.graph.as_graph_def(), name, root_in_xla=jit)
    if xla:
        try:
            # Variables need a device: lowered for XLA_CPU_JIT, whose op
            # coverage is TF2XLA's, shared by the GPU and TPU backends.
            traced.experimental_get_compiler_ir(*args)(stage="hlo")
            report.xla_error = None
        except Exception as error:  # noqa: BLE001 - any lowering failure is the finding
            report.xla_error = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
        # The XLA_GPU_JIT registrations exist once a lowering has started.
        # Placeholder is the graph's input; compiled, it is an _Arg.
        report.xla_gpu_missing = tuple(op for op in report.op_types
                                       if op != "Placeholder" and not _has_xla_gpu_kernel(op))
    return report


_XLA_GPU = {}


def _has_xla_gpu_kernel(op_type) -> bool:
    if op_type not in _XLA_GPU:
        _XLA_GPU[op_type] = any(k.device_type == "XLA_GPU_JIT" for k in
                                kernels.get_registered_kernels_for_op(op_type).kernel)
    return _XLA_GPU[op_type]


def summary(reports) -> str:
    """One line per path: op types checked, fallbacks, XLA result."""
    lines = []
    for report in reports.values():
        xla = {None: "XLA ok", "not checked": "XLA not checked"}.get(report.xla_error,
                                                                     "XLA FAILED")
        if report.xla_gpu_missing:
            xla += f" (no XLA GPU kernel: {', '.join(report.xla_gpu_missing)})"
        fallback = ", ".join(sorted(report.fallback)) or "none"
        lines.append(f"{report.name}: {len(report.op_types)} op types, fallback: {fallback}, "
                     f"{xla}")
    return "\n".join(lines)

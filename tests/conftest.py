"""Test-session set-up shared by the whole suite."""

import gc
import json
import os
import pathlib
import statistics

# Quiet TensorFlow's C++ start-up chatter; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Under pytest-xdist each worker gets its share of the cores for TensorFlow
# (2 workers on 2 cores: one thread each) instead of thread pools as wide as
# the machine per worker, whose idle threads spin while the other worker
# waits for a core. In the environment too, so the subprocesses a test starts
# (notebook kernels, CLI runs) do the same; values already set are kept. Both
# pools get the same size, as `python -m zoo train --threads N` sets them, so
# a run's thread fingerprint is the same in this process and in a subprocess.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _share = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _share)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", _share)

# XLA compiles with LLVM's optimisations off. A test's compiled functions run
# a few steps on small data, so compiling them is most of their cost: the JAX
# suite, which compiles every step, ran 37 s of Flipout, LSTM and mean-mode
# tests in 19 s this way. The optimisation level changes how fast compiled
# code runs, not what it computes. Set before TensorFlow and JAX start XLA,
# and in the environment, so subprocesses get it too; a value already set
# (a developer's own XLA_FLAGS) is kept.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import tensorflow as tf  # noqa: E402

# Two logical CPU devices, so tf.distribute tests can run two replicas on
# one physical CPU. This must happen before TensorFlow initialises devices.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    if "TF_NUM_INTRAOP_THREADS" in os.environ:
        tf.config.threading.set_intra_op_parallelism_threads(
            int(os.environ["TF_NUM_INTRAOP_THREADS"]))
    if "TF_NUM_INTEROP_THREADS" in os.environ:
        tf.config.threading.set_inter_op_parallelism_threads(
            int(os.environ["TF_NUM_INTEROP_THREADS"]))
except RuntimeError:  # devices already initialised by an earlier import
    pass

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fixed_global_seeds():
    """Every test starts from the same Python, NumPy and TensorFlow seeds.

    A per-test reset keeps results independent of test order.
    """
    keras.utils.set_random_seed(20261120)


@pytest.fixture
def mixed_float16():
    """The global policy is mixed_float16 for this test, restored afterwards."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy(previous)


# Seconds each test file took (setup, calls and teardown), written by
# `pytest --write-file-seconds`; only the order of the run depends on it.
FILE_SECONDS = pathlib.Path(__file__).with_name("file_seconds.json")


def pytest_addoption(parser):
    parser.addoption("--write-file-seconds", action="store_true",
                     help=f"after the run, write each test file's seconds to {FILE_SECONDS.name} "
                          "(the costliest files are scheduled first)")


def _read_file_seconds():
    try:
        return json.loads(FILE_SECONDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _relative(path):
    return pathlib.Path(path).resolve().relative_to(FILE_SECONDS.parents[1]).as_posix()


def pytest_collection_finish(session):
    """What is loaded by now (TensorFlow, Keras, the ~500,000 objects of the
    imported modules and collected tests) lives to the end of the run: it is
    moved out of the cyclic garbage collector's reach (`gc.freeze`), so a full
    collection scans only what the tests create. Keras' `clear_session` runs
    one, and the product calls it per trial and per split; in a test worker
    the full collections took 6% of the time (12.5 of 209 s over
    tests/zoo/run and tests/zoo/models, 7.2 s frozen). Nothing frozen is
    garbage yet: a collection runs first.
    """
    gc.collect()
    gc.freeze()


def pytest_ignore_collect(collection_path, config):
    """On JAX, a test file that never names the `jax` mark is not imported.

    Its tests would all be deselected (`pytest_collection_modifyitems`), but
    importing it costs each worker the modules it needs (tf_keras, the zoo,
    scikit-learn, ...): about 131 of the 209 files. The mark is applied only
    in the test files themselves, as `pytest.mark.jax` (a module's
    `pytestmark`, a decorator or a `pytest.param`), so a file whose text
    lacks "mark.jax" has no test to run here.
    """
    del config
    if keras.backend.backend() != "jax":
        return None
    path = pathlib.Path(collection_path)
    if not (path.is_file() and path.name.startswith("test_") and path.suffix == ".py"):
        return None
    return "mark.jax" not in path.read_text(encoding="utf-8") or None


def _check_marks_are_visible(items):
    """A jax-marked test in a file without the text "mark.jax" (the mark applied
    through an alias, say) would be skipped on JAX by `pytest_ignore_collect`:
    the TensorFlow run refuses to start instead."""
    marked = {item.path for item in items if item.get_closest_marker("jax")}
    hidden = sorted(str(path) for path in marked
                    if "mark.jax" not in path.read_text(encoding="utf-8"))
    if hidden:
        raise pytest.UsageError(
            f"{hidden[0]}: tests marked jax, but the file never writes `pytest.mark.jax`, so "
            "`KERAS_BACKEND=jax pytest` would not import it; write the mark out there.")


def _runs_on_jax(item):
    """Marked `jax`, and not the `jit_compile=False` case of a test run both ways:
    on JAX that runs a step eagerly, op by op, which is no path JAX trains on
    (the compiled one is checked on JAX, both are on TensorFlow)."""
    callspec = getattr(item, "callspec", None)
    eager = callspec is not None and callspec.params.get("jit_compile") is False
    return bool(item.get_closest_marker("jax")) and not eager


def pytest_collection_modifyitems(config, items):
    """On JAX only the tests marked `jax`; then costliest files first.

    `KERAS_BACKEND=jax pytest` runs the tests marked `pytest.mark.jax`
    (a module's `pytestmark`, usually): the parts of the package ported to
    `keras.ops` and TFP's JAX substrate, checked on both backends, less the
    `jit_compile=False` cases (`_runs_on_jax`). The rest is deselected, and
    the count is reported as pytest reports deselection.

    With `--dist loadfile` each file goes whole to the next free worker in
    the order given here (pytest.ini turns off xdist's own reordering, by
    number of tests per file, which put the few long tests of the notebooks
    and the main job last). Longest first keeps both workers busy to the end.
    A file missing from file_seconds.json counts as the median file, or as
    the costliest if it has a slow test.
    """
    if keras.backend.backend() != "jax":
        _check_marks_are_visible(items)
    if keras.backend.backend() == "jax":
        kept = [item for item in items if _runs_on_jax(item)]
        dropped = [item for item in items if not _runs_on_jax(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    seconds = _read_file_seconds()
    known = sorted(seconds.values())
    typical, top = (statistics.median(known), known[-1]) if known else (0.0, 1.0)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    cost = {}
    for item in items:
        if item.path not in cost:
            cost[item.path] = seconds.get(_relative(item.path),
                                          top if item.path in slow else typical)
    items.sort(key=lambda item: -cost[item.path])  # stable


_seconds_by_file = {}


def pytest_runtest_logreport(report):
    # On the xdist controller this sees every worker's reports.
    path = report.nodeid.split("::")[0]
    _seconds_by_file[path] = _seconds_by_file.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    if session.config.getoption("--write-file-seconds") and not hasattr(session.config,
                                                                         "workerinput"):
        # Files this run did not reach keep their entry; deleted files lose theirs.
        root = FILE_SECONDS.parents[1]
        table = {path: value for path, value in _read_file_seconds().items()
                 if (root / path).is_file()}
        table.update((path, round(value, 1)) for path, value in _seconds_by_file.items())
        FILE_SECONDS.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n",
                                encoding="utf-8")

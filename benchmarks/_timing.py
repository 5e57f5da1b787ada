"""Timing helpers shared by the benchmark scripts.

A benchmark builds a few compiled models ("variants"), warms each up once
(tracing, XLA compilation), then runs `fit` on them in interleaved rounds, so
that a burst of load from another process on a shared machine hits every
variant about equally instead of one variant's whole run. Each `fit` call
records the wall time of every training step (`train_function` from
`on_train_batch_begin` to `on_train_batch_end`), the first step of a call
excluded because it also starts the input iterator. Medians are reported.
"""

import os
import platform
import time

import numpy as np


def step_timer(callback_base, wait=None):
    """A callback instance recording per-step wall times, in seconds.

    `callback_base` is the `Callback` class of the framework the model comes
    from (`keras.callbacks.Callback` or `tf_keras.callbacks.Callback`);
    each framework's `fit` wants its own. The step times are in `.times`.
    `wait`, if given, is called on the step's log values before the clock
    stops (`jax.block_until_ready`: JAX dispatches asynchronously).
    """

    class StepTimer(callback_base):
        def __init__(self):
            super().__init__()
            self.times = []
            self._start = None

        def on_train_batch_begin(self, batch, logs=None):
            self._start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if wait is not None:
                wait(list((logs or {}).values()))
            self.times.append(time.perf_counter() - self._start)

    return StepTimer()


def _message_line(error) -> str:
    """The line of an error's message that says what went wrong.

    The first, except where it only introduces a traceback (TensorFlow's
    "in user code:"): then the last.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].endswith(":") and len(lines) > 1 else lines[0]


class Variant:
    """One model to time: a name, a `fit` function and the samples so far.

    Args:
        name: row label in the printed table.
        fit_steps: callable(steps) running `steps` training steps through
            the framework's `fit` and returning the per-step times in seconds.
    """

    def __init__(self, name, fit_steps):
        self.name = name
        self.fit_steps = fit_steps
        self.samples = []
        self.warmup_seconds = None
        self.error = None

    def warm_up(self, steps):
        start = time.perf_counter()
        try:
            self.fit_steps(steps)
        except Exception as error:  # a variant that cannot compile is reported, not fatal
            self.error = f"{type(error).__name__}: {_message_line(error)[:120]}"
        self.warmup_seconds = time.perf_counter() - start

    def run(self, steps):
        times = self.fit_steps(steps)
        self.samples.extend(times[1:])

    @property
    def ok(self):
        return self.error is None

    def median(self):
        return float(np.median(self.samples)) if self.samples else float("nan")

    def quartiles(self):
        if not self.samples:
            return float("nan"), float("nan")
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q1), float(q3)


def timed(name, operation, calls=1, keep=None):
    """A `Variant` whose one step is `calls` timed calls of `operation()`.

    For work that is not a `fit` (a prediction, a forward pass). `keep`, if a
    list, receives every result (for scoring after the timing).
    """

    def run(steps):
        times = []
        for _ in range(steps * calls):
            start = time.perf_counter()
            result = operation()
            times.append(time.perf_counter() - start)
            if keep is not None:
                keep.append(result)
        return times

    return Variant(name, run)


def run_round_robin(variants, repeats, steps, log=print):
    """Runs `repeats` rounds of `steps` steps per variant, order rotated each round."""
    live = [v for v in variants if v.ok]
    for round_index in range(repeats):
        shift = round_index % max(len(live), 1)
        for variant in live[shift:] + live[:shift]:
            variant.run(steps)
        log(f"  round {round_index + 1}/{repeats} done")


def format_table(title: str, variants: list, baseline=None) -> str:
    """A fixed-width table of median step times, relative to `baseline`."""
    lines = [title]
    header = (f"  {'variant':<48} {'median ms':>9} {'IQR ms':>15} {'n':>5} {'x base':>7}"
              f" {'warm-up s':>9}")
    lines.append(header)
    lines.append("  " + "-" * (len(header) - 2))
    base = baseline.median() if baseline is not None and baseline.ok else None
    for v in variants:
        if not v.ok:
            lines.append(f"  {v.name:<48} {'n/a':>9}  ({v.error})")
            continue
        q1, q3 = v.quartiles()
        rel = f"{v.median() / base:7.2f}" if base else f"{'':>7}"
        lines.append(
            f"  {v.name:<48} {v.median() * 1e3:9.2f} {q1 * 1e3:7.2f}-{q3 * 1e3:<7.2f}"
            f" {len(v.samples):5d} {rel} {v.warmup_seconds:9.1f}"
        )
    return "\n".join(lines)


def ratio_line(label: str, numerator, denominator, target=None) -> str:
    """`label: r` with a PASS/MISS against `target` ("<= x" or ">= x")."""
    if not (numerator.ok and denominator.ok and numerator.samples and denominator.samples):
        return f"{label}: n/a"
    ratio = numerator.median() / denominator.median()
    line = f"{label}: {ratio:.2f}"
    if target is not None:
        op, bound = target
        met = ratio <= bound if op == "<=" else ratio >= bound
        line += f"   (target {op} {bound}: {'PASS' if met else 'MISS'})"
    return line


def print_report(tables, ratios):
    """Prints each table after a blank line, then a blank line and the ratio lines.

    Args:
        tables: (title, {key: Variant}, baseline key) per table, for `format_table`.
        ratios: (label, numerator, denominator, target or None) per line, for `ratio_line`.
    """
    for title, variants, baseline in tables:
        print()
        print(format_table(title, list(variants.values()), baseline=variants[baseline]))
    print()
    for label, numerator, denominator, target in ratios:
        print(ratio_line(label, numerator, denominator, target))


def machine_info() -> list:
    """Versions, cores and thread settings, as printable lines."""
    import keras
    import tensorflow as tf
    import tensorflow_probability as tfp

    try:
        import tf_keras

        tf_keras_version = tf_keras.__version__
    except ImportError:
        tf_keras_version = "not installed"
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    lines = [
        f"python {platform.python_version()} on {platform.machine()} ({platform.system()})",
        f"tensorflow {tf.__version__}, tensorflow-probability {tfp.__version__}, "
        f"keras {keras.__version__} (backend {keras.backend.backend()}), "
        f"tf-keras {tf_keras_version}",
        f"cpu cores: {os.cpu_count()} (usable: {affinity}); load average: {load}",
        f"tf threads: intra-op {tf.config.threading.get_intra_op_parallelism_threads()}, "
        f"inter-op {tf.config.threading.get_inter_op_parallelism_threads()} (0 = TF default)",
        f"gpus: {len(tf.config.list_physical_devices('GPU'))}",
    ]
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415

        lines.append(f"jax {jax.__version__}, device: {jax.default_backend()} "
                     f"({', '.join(d.device_kind for d in jax.devices())})")
    return lines

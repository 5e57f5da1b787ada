"""The zoo's command-line flags: argparse types, their limits, and --set overrides.

Nothing here imports TensorFlow: a command line parses and checks its
arguments first, so a bad one ends in one line within a fraction of a
second, and only then starts TensorFlow (`start_tensorflow_quietly`).
"""

import argparse
import json
import math
import os
import sys

# Upper limits of the flags. Each keeps a typo (or a hostile value) from
# reaching code that would allocate, loop or overflow on it.
# tfp_bnn.predict.engine.MAX_NUM_SAMPLES, restated so that parsing arguments
# does not import TensorFlow (tests/zoo/test_flags.py keeps them equal).
MAX_SAMPLES = 10**6
# A million epochs of the smallest table is weeks of CPU time; any larger
# number is a typo. (runner.MAX_EPOCHS is the cap of the default, not a limit.)
MAX_EPOCHS = 10**6
# 2**20 rows per batch: far above any table or image set the zoo reads; one
# batch of 65536-wide activations at this size is already 256 GiB.
MAX_BATCH_SIZE = 2**20
# TensorFlow starts this many OS threads in each of its two pools; beyond
# the cores of any machine the zoo runs on they only cost memory and
# scheduling (1024 is 4 x the cores of the largest common CPU servers).
MAX_THREADS = 1024
# Split files of a UCI-layout directory (the standard ones have 20); the
# digits split index is added to the seed.
MAX_SPLIT = 10_000
# keras.utils.set_random_seed and numpy's generators take seeds < 2**32;
# split K of a generated or benchmark split uses seed + K, so the seed stops
# MAX_SPLIT short of that.
MAX_SEED = 2**32 - 1 - MAX_SPLIT
# One day: a longer interval is the same as no checkpoint before the end.
MAX_CHECKPOINT_SECONDS = 86_400.0
# Widest layer (units, filters, heads, flow components) a ready model may
# have: a 65536 x 65536 float32 kernel alone is 16 GiB.
MAX_UNITS = 65_536
# Weights of a ready model, estimated from its arguments before anything is
# allocated: 5e7 weights with a mean and a scale each and Adam's two moments
# of both are 1.6 GB of float32.
MAX_PARAMETERS = 5 * 10**7
# --set VALUE: lists nested at most this deep (hidden_units=[50] is depth 1)
# and at most this long (layers of an MLP).
MAX_OVERRIDE_DEPTH = 4
MAX_OVERRIDE_ITEMS = 256
# Builder arguments the zoo's runner sets itself, and the flag that sets each.
RUNNER_SETS = {
    "seed": "--seed",
    "decay_steps": "--epochs and --batch-size (a cosine decay over the whole run)",
    "num_train": "--dataset and --split (the training rows)",
    "input_shape": "--dataset",
    "task": "--dataset",
    "num_classes": "--dataset",
    "heteroscedastic": "the MODEL_heteroscedastic model (python -m zoo list)",
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "num_samples": "--samples",
    "samples": "--samples",
    "threads": "--threads",
    "strategy": "--strategy",
}
# Builder arguments that size a layer; every int in them is at most MAX_UNITS.
SIZE_ARGUMENTS = ("hidden_units", "filters", "width", "ff_dim", "num_heads", "num_components",
                  "flow_length")


def _shown(value, limit=40):
    """`value` for a message (a string quoted), shortened: a hostile one must not flood it."""
    text = str(value)
    shown = repr(text[:limit]) if isinstance(value, str) else text[:limit]
    return shown if len(text) <= limit else f"{shown}... ({len(text):,} characters)"


def _int_between(text, low, high, what):
    try:
        value = int(text)
    except ValueError:  # also a string of more than 4300 digits
        raise argparse.ArgumentTypeError(f"must be {what}, got {_shown(text)}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {_shown(value)}")
    return value


def positive_int(text):
    """argparse type: an int > 0."""
    return _int_between(text, 1, None, "a positive int")


def non_negative_int(text):
    """argparse type: an int >= 0."""
    return _int_between(text, 0, None, "a non-negative int")


def sample_count(text):
    """argparse type: Monte Carlo samples, an int from 1 to MAX_SAMPLES."""
    return _int_between(text, 1, MAX_SAMPLES, "a positive int")


def epoch_count(text):
    """argparse type: epochs, an int from 1 to MAX_EPOCHS."""
    return _int_between(text, 1, MAX_EPOCHS, "a positive int")


def batch_size(text):
    """argparse type: a batch size, an int from 1 to MAX_BATCH_SIZE."""
    return _int_between(text, 1, MAX_BATCH_SIZE, "a positive int")


def thread_count(text):
    """argparse type: CPU threads, an int from 0 (TensorFlow's default) to MAX_THREADS."""
    return _int_between(text, 0, MAX_THREADS, "a non-negative int")


def split_index(text):
    """argparse type: a split index, an int from 0 to MAX_SPLIT."""
    return _int_between(text, 0, MAX_SPLIT, "a non-negative int")


def split_count(text):
    """argparse type: a number of splits, an int from 1 to MAX_SPLIT."""
    return _int_between(text, 1, MAX_SPLIT, "a positive int")


def seed(text):
    """argparse type: a seed, an int from 0 to MAX_SEED (2**32 - 1 - MAX_SPLIT)."""
    return _int_between(text, 0, MAX_SEED, "a non-negative int")


def seconds(text):
    """argparse type: a finite number of seconds from 0 to MAX_CHECKPOINT_SECONDS."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {_shown(text)}") \
            from None
    if not (math.isfinite(value) and 0 <= value <= MAX_CHECKPOINT_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 0 to {MAX_CHECKPOINT_SECONDS:,.0f}, got "
            f"{_shown(text)}")
    return value


def check_sizes(name, value):
    """Raises ValueError if an int in `value` (an int or a sequence) exceeds MAX_UNITS."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    for item in values:
        if isinstance(item, int) and not isinstance(item, bool) and item > MAX_UNITS:
            raise ValueError(f"`{name}` must be at most {MAX_UNITS:,} per layer, got "
                             f"{_shown(item)}.")


def check_parameter_count(model, count, what):
    """Raises ValueError if a model's estimated weight count exceeds MAX_PARAMETERS."""
    if count > MAX_PARAMETERS:
        raise ValueError(f"{model} with {what} would have about {count:.3g} weights; the "
                         f"limit is {MAX_PARAMETERS:.3g} (choose smaller layers).")


def _check_value(key, value):
    """Walks a parsed --set value: depth, length, no null, finite numbers, layer sizes."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if item is None:
            raise ValueError(f"{key}=null: leave --set {key} out to get the default")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{key}: {item} is not a finite number")
        if isinstance(item, (list, dict)):
            if depth + 1 > MAX_OVERRIDE_DEPTH:
                raise ValueError(f"{key}: the value is nested more than "
                                 f"{MAX_OVERRIDE_DEPTH} levels deep")
            if len(item) > MAX_OVERRIDE_ITEMS:
                raise ValueError(f"{key}: at most {MAX_OVERRIDE_ITEMS} values in a "
                                 f"list, got {len(item):,}")
            pending.extend((child, depth + 1)
                           for child in (item.values() if isinstance(item, dict) else item))
    if key in SIZE_ARGUMENTS:
        check_sizes(key, value)


def parse_override(text):
    """`KEY=VALUE` -> (key, value), VALUE as JSON (numbers, lists) or a plain string.

    Raises:
        ValueError: no `=`, a key the runner sets itself (naming the flag to
            use), a null, non-finite or too large number, or a value nested
            too deeply.
    """
    if "=" not in text:
        raise ValueError(f"expected KEY=VALUE, got {_shown(text)}")
    key, raw = text.split("=", 1)
    if not key.isidentifier():
        raise ValueError(f"{_shown(key)} is not an argument name (expected KEY=VALUE)")
    if key in RUNNER_SETS:
        raise ValueError(f"{key} is set by {RUNNER_SETS[key]}, not by --set")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a plain string, e.g. posterior=gaussian
    except RecursionError:
        raise ValueError(f"{key}: the value is nested more than {MAX_OVERRIDE_DEPTH} "
                         "levels deep") from None
    _check_value(key, value)
    return key, tuple(value) if isinstance(value, list) else value


def override(text):
    """argparse type of `--set KEY=VALUE` (see `parse_override`)."""
    try:
        return parse_override(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class CollectOverrides(argparse.Action):
    """argparse action of `--set`: the (key, value) pairs into a dict, each key once."""

    def __call__(self, parser, namespace, values, option_string=None):
        key, value = values
        overrides = dict(getattr(namespace, self.dest, None) or {})
        if key in overrides:
            raise argparse.ArgumentError(self, f"{key} is given twice")
        overrides[key] = value
        setattr(namespace, self.dest, overrides)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), usage left to --help."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} "
                     f"(see {self.prog} --help)\n")


def start_tensorflow_quietly():
    """Imports TensorFlow without its start-up log lines on stderr.

    TF_CPP_MIN_LOG_LEVEL=3 silences its C++ logging from then on, but
    TensorFlow 2.21 writes a few lines (absl's "before InitializeLog"
    notice, the oneDNN and CUDA notes) before that setting is read, so file
    descriptor 2 points at /dev/null during the import. A failed import
    still raises, with its message. TF_ENABLE_ONEDNN_OPTS is left alone: it
    changes the numbers, not the logging.
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no file descriptor 2 (an embedded interpreter)
        import tensorflow  # noqa: F401, PLC0415
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
            import tensorflow  # noqa: F401, PLC0415
        finally:
            os.dup2(saved, 2)
            os.close(devnull)
    finally:
        os.close(saved)


def add_run_flags(parser, epochs, num_samples, epochs_help, seed_help, samples_help):
    """Adds --epochs, --seed and --samples (defaults shown in the help)."""
    parser.add_argument("--epochs", type=int, default=epochs,
                        help=f"{epochs_help} (default {epochs}, at most {MAX_EPOCHS:,})")
    parser.add_argument("--seed", type=int, default=0,
                        help=f"{seed_help} (default 0, below 2**32)")
    parser.add_argument("--samples", type=int, default=num_samples,
                        help=f"{samples_help} (default {num_samples}, at most {MAX_SAMPLES:,})")


def check_run_flags(parser, args):
    """Rejects --epochs / --samples / --seed out of range (exit 2)."""
    for name in ("epochs", "samples"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be a positive int, got {getattr(args, name)}")
    for name, high in (("epochs", MAX_EPOCHS), ("samples", MAX_SAMPLES), ("seed", MAX_SEED)):
        if getattr(args, name) > high:
            parser.error(f"--{name} must be at most {high:,}, got {getattr(args, name)}")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative int, got {args.seed}")


def reserve_report(parser, out):
    """Checks a command's `--out` FILE before any work: a new file in a writable directory.

    Creates `OUT.partial` exclusively, so a bad path fails now and not after
    the whole run, and returns its name (None when `out` is None). The
    report goes there and is then linked to `OUT` (`publish_report`). An
    existing `OUT` or `OUT.partial` is never overwritten or removed.
    """
    if out is None:
        return None
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        parser.error(f"--out: directory {out_dir} does not exist.")
    if os.path.lexists(out):
        parser.error(f"--out: {out} already exists; the zoo never overwrites a file "
                     "(choose a new name).")
    partial = f"{out}.partial"
    try:
        with open(partial, "x", encoding="utf-8"):
            pass
    except FileExistsError:
        parser.error(f"--out: {partial} exists (left by an interrupted run?); remove it or "
                     "choose another --out.")
    except OSError as error:
        parser.error(f"--out: cannot write in {out_dir}: {error.strerror}.")
    return partial


def publish_report(partial, out, text):
    """Writes `text` into the reserved `partial` and gives it the name `out`.

    A hard link, not a rename: should a file named `out` have appeared in
    the meantime, it is kept and this raises FileExistsError.
    """
    if partial is None:
        return
    with open(partial, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.link(partial, out)
    os.remove(partial)
    print(f"wrote {out}")


def discard_report(partial):
    """Removes the reservation `partial` if it is still there (the command made it)."""
    if partial is not None and os.path.exists(partial):
        os.remove(partial)

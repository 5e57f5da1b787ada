"""The zoo's command-line flags: argparse types, their limits, and --set overrides.

Nothing here imports TensorFlow: a command line parses and checks its
arguments first, so a bad one ends in one line within a fraction of a
second, and only then starts TensorFlow (`start_tensorflow_quietly`).
That is also why the flag types parse and bound their text here instead of
calling `tfp_bnn._validation`: importing `tfp_bnn` starts TensorFlow. Their
messages ("must be a positive int, got 0") are the same as its.
"""

import argparse
import json
import math
import os
import re
import sys

from zoo.models import limits
from zoo.models.limits import shown

# Upper limits of the flags. Each keeps a typo (or a hostile value) from
# reaching code that would allocate, loop or overflow on it.
# tfp_bnn.predict.limits.MAX_NUM_SAMPLES, restated so that parsing arguments
# does not import TensorFlow (tests/zoo/run/test_flags.py keeps them equal).
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
# --budget-minutes of `--model auto`: a week per split at most.
MAX_BUDGET_MINUTES = 7 * 24 * 60
# --budget-steps of `--model auto`: training steps of a search (a week at ~1 ms a step).
MAX_BUDGET_STEPS = 10**9
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


# Numbers as the data files write them (tfp_bnn.data.uci.parse_number; restated
# so that parsing arguments does not import TensorFlow, and kept equal by
# tests/zoo/run/test_flags.py): ASCII only. Python's int() and float() also
# take "1_0", full-width digits and surrounding spaces, which a data file refuses.
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
INTEGER = re.compile(r"[+-]?[0-9]+")
# Python's names of the non-finite floats, refused by name.
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


def _int_between(text, low, high, what):
    try:
        if not INTEGER.fullmatch(text):
            raise ValueError(text)
        value = int(text)
    except ValueError:  # also a string of more than 4300 digits
        raise argparse.ArgumentTypeError(f"must be {what}, got {shown(text)}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {shown(value)}")
    return value


def _int_type(low, high):
    """An argparse type: an int from `low` (0 or 1) to `high`, else one line saying so."""
    what = "a positive int" if low == 1 else "a non-negative int"
    return lambda text: _int_between(text, low, high, what)


def plain_int(text):
    """argparse type: an int in ASCII digits, of any sign and size (checked later)."""
    if not INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be an int, got {shown(text)}")
    if len(text) > 4300:  # int()'s own limit on digits
        raise argparse.ArgumentTypeError(f"must be an int of at most 4,300 digits, got "
                                         f"{shown(text)}")
    return int(text)


# The int flags and their ranges; each line is a flag type of argparse.
sample_count = _int_type(1, MAX_SAMPLES)  # Monte Carlo samples T
epoch_count = _int_type(1, MAX_EPOCHS)
batch_size = _int_type(1, MAX_BATCH_SIZE)
thread_count = _int_type(0, MAX_THREADS)  # 0: TensorFlow's default
split_index = _int_type(0, MAX_SPLIT)
split_count = _int_type(1, MAX_SPLIT)
budget_steps = _int_type(1, MAX_BUDGET_STEPS)
seed = _int_type(0, MAX_SEED)  # 2**32 - 1 - MAX_SPLIT: split K uses seed + K


def _number_type(unit, high, above_zero=False):
    """argparse type: a finite number of `unit` up to `high`, >= 0 (or > 0 if `above_zero`)."""
    span = f"above 0 and at most {high:,.0f}" if above_zero else f"from 0 to {high:,.0f}"

    def parse(text):
        if not (NUMBER.fullmatch(text) or _NON_FINITE.fullmatch(text)):
            raise argparse.ArgumentTypeError(f"must be a number of {unit}, got "
                                             f"{shown(text)}")
        value = float(text)
        if not (math.isfinite(value) and (value > 0 if above_zero else value >= 0)
                and value <= high):
            raise argparse.ArgumentTypeError(f"must be a number of {unit} {span}, got "
                                             f"{shown(text)}")
        return value
    return parse


seconds = _number_type("seconds", MAX_CHECKPOINT_SECONDS)
budget_minutes = _number_type("minutes", MAX_BUDGET_MINUTES, above_zero=True)


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
    if key in limits.SIZE_ARGUMENTS:
        limits.check_sizes(key, value)


def parse_override(text):
    """`KEY=VALUE` -> (key, value), VALUE as JSON (numbers, lists) or a plain string.

    Raises:
        ValueError: no `=`, a key the runner sets itself (naming the flag to
            use), a null, non-finite or too large number, or a value nested
            too deeply.
    """
    if "=" not in text:
        raise ValueError(f"expected KEY=VALUE, got {shown(text)}")
    key, raw = text.split("=", 1)
    if not key.isidentifier():
        raise ValueError(f"{shown(key)} is not an argument name (expected KEY=VALUE)")
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


# A value after a flag that argparse would take for an option: "-inf", "-1e3"
# ("-5" and "-.5" it reads as negative numbers itself).
_NEGATIVE_VALUE = re.compile(r"-(?:[0-9.]|inf|nan)", re.IGNORECASE)


def attach_negative_values(argv):
    """`argv` with `--flag -inf` written as `--flag=-inf`, so that the flag's type judges
    the value (argparse took `-inf` for an option and said 'expected one argument')."""
    joined = []
    for token in argv:
        previous = joined[-1] if joined else ""
        if (previous.startswith("--") and "=" not in previous and len(previous) > 2
                and _NEGATIVE_VALUE.match(token)):
            joined[-1] = f"{previous}={token}"
        else:
            joined.append(token)
    return joined


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), usage left to --help.

    A negative value after a flag (`--budget-minutes -inf`) is the flag's
    value, for its type to accept or refuse.
    """

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else args
        return super().parse_known_args(attach_negative_values(list(args)), namespace)

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

    On Keras' JAX backend (`KERAS_BACKEND=jax`) nothing is imported: the
    JAX core runs without TensorFlow, which a GPU machine may not have.
    """
    if "tensorflow" in sys.modules or os.environ.get("KERAS_BACKEND") == "jax":
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


def run_parser(prog, description, epochs, num_samples, epochs_help, seed_help, samples_help):
    """A `OneLineParser` with --epochs, --seed and --samples (defaults shown in the help).

    The values are read as plain ints; `check_run_flags` then applies the
    limits of the flag types, so a command can give 0 a meaning of its own.
    """
    parser = OneLineParser(prog=prog, description=description)
    parser.add_argument("--epochs", type=plain_int, default=epochs,
                        help=f"{epochs_help} (default {epochs}, at most {MAX_EPOCHS:,})")
    parser.add_argument("--seed", type=plain_int, default=0,
                        help=f"{seed_help} (default 0, below 2**32)")
    parser.add_argument("--samples", type=plain_int, default=num_samples,
                        help=f"{samples_help} (default {num_samples}, at most {MAX_SAMPLES:,})")
    return parser


def check_run_flags(parser, args):
    """Rejects --epochs / --samples / --seed out of range (exit 2), by the flag types' limits."""
    for name, kind in (("epochs", epoch_count), ("samples", sample_count), ("seed", seed)):
        try:
            kind(str(getattr(args, name)))
        except argparse.ArgumentTypeError as error:
            parser.error(f"--{name} {error}")

"""The --epochs / --seed / --samples flags every zoo command takes, --out, and argparse types."""

import argparse
import math
import pathlib


def _int_at_least(text, low, what):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text):
    """argparse type: an int > 0."""
    return _int_at_least(text, 1, "a positive int")


# tfp_bnn.predict.engine.MAX_NUM_SAMPLES, restated so that parsing arguments
# does not import TensorFlow (tests/zoo/test_flags.py keeps them equal).
MAX_SAMPLES = 10**6


def sample_count(text):
    """argparse type: Monte Carlo samples, an int from 1 to MAX_SAMPLES."""
    value = positive_int(text)
    if value > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SAMPLES:,}, got {value}")
    return value


def non_negative_int(text):
    """argparse type: an int >= 0."""
    return _int_at_least(text, 0, "a non-negative int")


def seconds(text):
    """argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def add_run_flags(parser, epochs, num_samples, epochs_help, seed_help, samples_help):
    """Adds --epochs, --seed and --samples (defaults shown in the help)."""
    parser.add_argument("--epochs", type=int, default=epochs,
                        help=f"{epochs_help} (default {epochs})")
    parser.add_argument("--seed", type=int, default=0, help=f"{seed_help} (default 0)")
    parser.add_argument("--samples", type=int, default=num_samples,
                        help=f"{samples_help} (default {num_samples})")


def check_run_flags(parser, args):
    """Rejects non-positive --epochs / --samples and a negative --seed (exit 2)."""
    for name in ("epochs", "samples"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be a positive int, got {getattr(args, name)}")
    if args.samples > MAX_SAMPLES:
        parser.error(f"--samples must be at most {MAX_SAMPLES:,}, got {args.samples}")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative int, got {args.seed}")


def write_report(path, markdown):
    """Writes a command's Markdown report to `path` (the --out flag) and says so."""
    if path is not None:
        pathlib.Path(path).write_text(markdown, encoding="utf-8")
        print(f"wrote {path}")

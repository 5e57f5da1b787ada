"""The command line: `python -m zoo [list | train | evaluate | benchmark]`.

    python -m zoo                      the main job (BBB MLP on concrete; zoo.main_job)
    python -m zoo list                 ready models and built-in datasets
    python -m zoo train MODEL --dataset DATASET [--split K] [--epochs N] [--seed S]
                        [--strategy default|mirrored|multiworker] [--out DIR]
    python -m zoo evaluate DIR         reload a finished run and score it again
    python -m zoo benchmark uci --dataset DIR --model MODEL [--splits N]

DATASET is a built-in name (`python -m zoo list`), a directory in the UCI
benchmark layout, or a .csv time series.
"""

import argparse
import json
import sys

from zoo import datasets
from zoo import registry
from zoo.flags import non_negative_int
from zoo.flags import positive_int
from zoo.flags import sample_count
from zoo.flags import seconds

COMMANDS = ("list", "train", "evaluate", "benchmark")


def _override(text):
    """KEY=VALUE with VALUE as JSON (numbers, lists) or a plain string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        value = json.loads(value)
    except json.JSONDecodeError:
        pass
    if isinstance(value, list):
        value = tuple(value)
    return key, value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m zoo",
        description="Ready Bayesian models: list them, train one, evaluate a run, run the "
                    "UCI benchmark. Without a command: the main job (see zoo.main_job).")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="ready models and built-in datasets")

    train = commands.add_parser("train", help="train a ready model and write a run directory")
    train.add_argument("model", help="a model name from `python -m zoo list`")
    train.add_argument("--dataset", required=True,
                       help="built-in name, UCI-layout directory, or .csv series")
    train.add_argument("--split", type=non_negative_int, default=0, help="split index (default 0)")
    train.add_argument("--epochs", type=positive_int, default=None,
                       help="training epochs (default: 30 for classification, about 6000 "
                            "steps for regression)")
    train.add_argument("--seed", type=non_negative_int, default=0,
                       help="seed of weights, noise and generated splits (default 0)")
    train.add_argument("--strategy", choices=("default", "mirrored", "multiworker"),
                       default="default",
                       help="tf.distribute strategy; multiworker reads TF_CONFIG")
    train.add_argument("--out", default=None,
                       help="run directory (default runs/MODEL-DATASET-splitK-seedS)")
    train.add_argument("--batch-size", type=positive_int, default=32, help="global batch size")
    train.add_argument("--samples", type=sample_count, default=100,
                       help="Monte Carlo samples at test time (default 100)")
    train.add_argument("--set", type=_override, action="append", default=[],
                       metavar="KEY=VALUE",
                       help="builder argument, e.g. --set hidden_units=[100] --set rate=0.1")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--checkpoint-seconds", type=seconds, default=2.0,
                       help="minimum seconds between checkpoints (default 2; 0: every "
                            "epoch); a killed run resumes from the last one")
    train.add_argument("--threads", type=non_negative_int, default=1,
                       help="CPU threads for TensorFlow (default 1: the same seed gives "
                            "bit-identical runs; 0: TensorFlow's default, all cores, runs "
                            "then differ in the last float bits); results.json records it")

    evaluate = commands.add_parser("evaluate", help="reload a finished run and score it")
    evaluate.add_argument("run_dir", help="a directory written by `python -m zoo train`")
    evaluate.add_argument("--samples", type=sample_count, default=None,
                          help="Monte Carlo samples (default: the run's)")

    benchmark = commands.add_parser("benchmark", add_help=False,
                                    help="protocol benchmarks: `benchmark uci --help`")
    benchmark.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _list():
    print("models:")
    for name in registry.list_models():
        spec = registry.get_spec(name)
        print(f"  {name:32s} {'/'.join(spec.tasks):26s} {spec.summary}")
        print(f"  {'':32s} {'':26s} after {spec.paper}")
    print("datasets (or a path to a UCI-layout directory or a .csv series):")
    for name, task, what in datasets.describe_builtin():
        print(f"  {name:32s} {task:26s} {what}")
    return 0


def _print_metrics(metrics, prefix=""):
    keys = [k for k in ("rmse", "log_likelihood", "coverage_95", "accuracy", "nll", "ece",
                        "brier") if k in metrics]
    print(prefix + "  ".join(f"{k} {metrics[k]:.4f}" for k in keys))


def _train(args):
    from zoo import runner  # noqa: PLC0415 - TensorFlow only for the commands that need it

    out = args.out or (f"runs/{args.model}-{str(args.dataset).rstrip('/').split('/')[-1]}"
                       f"-split{args.split}-seed{args.seed}")
    # In a fresh `python -m zoo` process this always applies; called from a
    # Python session that has started TensorFlow, its threads stay as they are.
    runner.set_threads(args.threads, strict=False)
    result = runner.train_and_evaluate(
        args.model, args.dataset, out, split=args.split, epochs=args.epochs, seed=args.seed,
        strategy=args.strategy, batch_size=args.batch_size, num_samples=args.samples,
        verbose=0 if args.quiet else 1, overrides=dict(args.set),
        checkpoint_seconds=args.checkpoint_seconds)
    _print_metrics(result, "test: ")
    print(f"wrote {out} ({result['total_seconds']:.1f} s)")
    return 0


def _evaluate(args):
    from zoo import runner  # noqa: PLC0415

    stored, fresh = runner.evaluate(args.run_dir, num_samples=args.samples)
    _print_metrics(stored, "stored: ")
    _print_metrics(fresh, "now:    ")
    return 0


# Exit codes: 2 bad input (argparse's own), 3 training diverged, 130 interrupted.
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130


def _one_line(error):
    """The message of `error` on one line (no traceback)."""
    text = " ".join(str(error).split())
    if isinstance(error, OSError) and not isinstance(error, FileNotFoundError):
        where = f" ({error.filename})" if error.filename else ""
        text = f"{error.strerror or text}{where}"
    return text or type(error).__name__


def _benchmark(argv):
    """`python -m zoo benchmark ...`: exit code 0 once the table is printed and saved."""
    from zoo import uci_benchmark  # noqa: PLC0415

    uci_benchmark.main(argv)  # returns the result dict, which is no exit code
    return 0


def _run(command, function, *arguments):
    """Runs a command; a bad input, divergence or interruption ends in one line on stderr."""
    prog = " ".join(("python -m zoo", command)) if command else "python -m zoo"
    try:
        return function(*arguments)
    except FloatingPointError as error:
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_DIVERGED
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        hint = " run the same command again to resume from the checkpoint." \
            if command == "train" else ""
        print(f"{prog}: interrupted.{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv=None):
    """Entry point of `python -m zoo`; returns the exit code.

    Bad input (unknown names, invalid numbers, unreadable or unwritable
    paths, corrupted files) ends with one line on stderr and exit code 2;
    a diverged training run with exit code 3; Ctrl-C with 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS + ("-h", "--help"):
        from zoo import main_job  # noqa: PLC0415

        return _run("", main_job.main, argv)
    parser = build_parser()
    if argv[0] == "benchmark":
        return _run("benchmark", _benchmark, argv[1:])
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "train":
        return _run("train", _train, args)
    return _run("evaluate", _evaluate, args)

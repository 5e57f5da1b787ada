"""The command line: `python -m zoo [list | train | evaluate | benchmark]`.

    python -m zoo                      the main job (BBB MLP on concrete; zoo.experiments.main_job)
    python -m zoo list                 ready models and built-in datasets
    python -m zoo train MODEL|auto --dataset DATASET [--split K] [--epochs N] [--seed S]
                        [--strategy default|mirrored|multiworker] [--out DIR]
    python -m zoo evaluate DIR         reload a finished run and score it again
    python -m zoo benchmark uci --dataset DIR --model MODEL|auto [--splits N]
    python -m zoo --version            the installed tfp-bnn's version

DATASET is a built-in name (`python -m zoo list`), a directory in the UCI
benchmark layout, or a .csv time series.
"""

import argparse
import ast
import errno
import importlib.util
import pathlib
import re
import sys

from zoo.models import limits
from zoo.run import flags
from zoo.experiments import uci_benchmark_args

COMMANDS = ("list", "train", "evaluate", "benchmark")
# What --samples costs, measured with bbb_mlp on yacht's 31 test rows on 2 CPU cores:
# time and memory grow with samples x test rows (the sampled means and variances are kept).
SAMPLES_COST = ("time and memory grow with samples x test rows: 1,000,000 samples of a "
                "small MLP on 31 rows take about a minute and 1 GB")
# KEY=VALUE with VALUE as JSON (numbers, lists) or a plain string.
_override = flags.override


def package_version():
    """tfp_bnn's `__version__`, read from the file Python would import, without importing it.

    Importing tfp_bnn starts TensorFlow (seconds); `--version` answers at once.
    """
    init = pathlib.Path(importlib.util.find_spec("tfp_bnn").origin)
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                getattr(target, "id", None) == "__version__" for target in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{init} assigns no __version__")


def build_parser():
    parser = flags.OneLineParser(
        prog="python -m zoo",
        description="Ready Bayesian models: list them, train one, evaluate a run, run the "
                    "UCI benchmark. Without a command: the main job "
                    "(zoo.experiments.main_job).")
    parser.add_argument("--version", action="version", version=f"tfp-bnn {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="ready models and built-in datasets")

    train = commands.add_parser("train", help="train a ready model and write a run directory")
    train.add_argument("model", help="a model name from `python -m zoo list`, or 'auto': "
                                      "choose a regression model and its settings on the "
                                      "split's training rows")
    train.add_argument("--dataset", required=True,
                       help="built-in name, UCI-layout directory, or .csv series")
    train.add_argument("--split", type=flags.split_index, default=0,
                       help=f"split index (default 0, at most {flags.MAX_SPLIT:,})")
    train.add_argument("--epochs", type=flags.epoch_count, default=None,
                       help="training epochs (default: 30 for classification, about 6000 "
                            f"steps for regression; at most {flags.MAX_EPOCHS:,})")
    train.add_argument("--seed", type=flags.seed, default=0,
                       help="seed of weights, noise and generated splits (default 0, at most "
                            f"{flags.MAX_SEED:,})")
    train.add_argument("--strategy", choices=("default", "mirrored", "multiworker"),
                       default="default",
                       help="tf.distribute strategy; multiworker reads TF_CONFIG")
    train.add_argument("--out", default=None,
                       help="run directory (default runs/MODEL-DATASET-splitK-seedS)")
    train.add_argument("--batch-size", type=flags.batch_size, default=None,
                       help=f"global batch size (default 32, at most {flags.MAX_BATCH_SIZE:,})")
    train.add_argument("--budget-steps", type=flags.budget_steps, default=None,
                       help="only with model 'auto': a cap on the search's training steps "
                            "(default: none, every candidate's full run; at most "
                            f"{flags.MAX_BUDGET_STEPS:,}); counted in steps, the choice is the "
                            "same on any machine")
    train.add_argument("--budget-minutes", type=flags.budget_minutes, default=None,
                       help="only with model 'auto': an optional wall-time cap of the "
                            "search (the choice then depends on the machine; at most "
                            f"{flags.MAX_BUDGET_MINUTES:,})")
    train.add_argument("--samples", type=flags.sample_count, default=100,
                       help="Monte Carlo samples at test time (default 100, at most "
                            f"{flags.MAX_SAMPLES:,}; {SAMPLES_COST})")
    train.add_argument("--set", type=_override, action=flags.CollectOverrides, default={},
                       dest="overrides", metavar="KEY=VALUE",
                       help="builder argument, e.g. --set hidden_units=[100] --set rate=0.1 "
                            f"(layer sizes at most {limits.MAX_UNITS:,}; not the arguments "
                            "the flags set: seed, decay_steps, ...)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--checkpoint-seconds", type=flags.seconds, default=2.0,
                       help="minimum seconds between checkpoints (default 2; 0: every "
                            f"epoch; at most {flags.MAX_CHECKPOINT_SECONDS:,.0f}); a killed "
                            "run resumes from the last one")
    train.add_argument("--threads", type=flags.thread_count, default=1,
                       help="CPU threads for TensorFlow (default 1: the same seed gives "
                            "bit-identical runs; 0: TensorFlow's default, all cores, runs "
                            "then differ in the last float bits; at most "
                            f"{flags.MAX_THREADS}); results.json records it")

    evaluate = commands.add_parser("evaluate", help="reload a finished run and score it")
    evaluate.add_argument("run_dir", help="a directory written by `python -m zoo train`")
    evaluate.add_argument("--samples", type=flags.sample_count, default=None,
                          help="Monte Carlo samples (default: the run's, at most "
                               f"{flags.MAX_SAMPLES:,}; {SAMPLES_COST})")

    benchmark = commands.add_parser("benchmark", add_help=False,
                                    help="protocol benchmarks: `benchmark uci --help`")
    benchmark.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _list():
    from zoo.run import datasets  # noqa: PLC0415 - TensorFlow only once the arguments are read
    from zoo.models import registry  # noqa: PLC0415

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
    from zoo.models import registry  # noqa: PLC0415 - TensorFlow only for the commands that need it
    from zoo.run import runner  # noqa: PLC0415

    # The model and its --set keys before the data is read or anything written.
    if args.model == runner.AUTO:
        given = [flag for flag, value in (("--epochs", args.epochs),
                                          ("--batch-size", args.batch_size),
                                          ("--set", args.overrides)) if value]
        if given:
            raise ValueError(f"{given[0]}: model 'auto' chooses its own settings (name a "
                             "model to set them).")
    else:
        for flag, value in (("--budget-steps", args.budget_steps),
                            ("--budget-minutes", args.budget_minutes)):
            if value is not None:
                raise ValueError(f"{flag}: only model 'auto' searches within a budget; "
                                 f"{args.model!r} trains for --epochs (drop the flag).")
        registry.check_overrides(args.model, args.overrides)
    name = limits.printable(str(args.dataset).rstrip('/').split('/')[-1])  # UTF-8 for TF
    out = args.out or f"runs/{args.model}-{name}-split{args.split}-seed{args.seed}"
    # In a fresh `python -m zoo` process this always applies; called from a
    # Python session that has started TensorFlow, its threads stay as they are.
    runner.set_threads(args.threads, strict=False)
    result = runner.train_and_evaluate(
        args.model, args.dataset, out, split=args.split, epochs=args.epochs, seed=args.seed,
        strategy=args.strategy, batch_size=args.batch_size, num_samples=args.samples,
        verbose=0 if args.quiet else 1, overrides=args.overrides,
        checkpoint_seconds=args.checkpoint_seconds, budget_steps=args.budget_steps,
        budget_minutes=args.budget_minutes)
    _print_metrics(result, "test: ")
    print(f"wrote {out} ({result['total_seconds']:.1f} s)")
    return 0


def _evaluate(args):
    from zoo.run import runner  # noqa: PLC0415

    stored, fresh = runner.evaluate(args.run_dir, num_samples=args.samples)
    _print_metrics(stored, "stored: ")
    _print_metrics(fresh, "now:    ")
    return 0


# Exit codes: 2 bad input (argparse's own), 3 training diverged, 130 interrupted.
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_INTERRUPTED = 130


# What a failed write's errno means for the user (the kernel's text alone,
# "File too large", does not say that a limit or a full disk is the cause).
_WRITE_FAILURES = {
    errno.EFBIG: "the file would pass the size limit on files (ulimit -f) or the disk is full",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
}


def _one_line(error):
    """The message of `error` on one line (no traceback)."""
    text = " ".join(str(error).split())
    if isinstance(error, OSError) and not isinstance(error, FileNotFoundError):
        where = f" ({error.filename})" if error.filename else ""
        if error.errno in _WRITE_FAILURES:
            writing = f"writing {error.filename}: " if error.filename else ""
            where = f" ({writing}{_WRITE_FAILURES[error.errno]})"
        text = f"{error.strerror or text}{where}"
    return text or type(error).__name__


def _benchmark(argv):
    """`python -m zoo benchmark ...`: exit code 0 once the table is printed and saved."""
    from zoo.experiments import uci_benchmark  # noqa: PLC0415 - TensorFlow after the arguments

    uci_benchmark.main(argv)  # returns the result dict, which is no exit code
    return 0


def _too_large(error):
    """What a MemoryError, RecursionError, OverflowError or TensorFlow OOM says, on one line."""
    text = _one_line(error)
    shape = re.search(r"OOM when allocating tensor with shape\[[^\]]*\]", text)
    if shape:
        return f"out of memory ({shape.group(0)}); use a smaller --batch-size or layers"
    if len(text) > 200:
        text = text[:200] + "..."
    what = {MemoryError: "out of memory", RecursionError: "input nested too deeply",
            OverflowError: "a number is too large"}
    for kind, summary in what.items():
        if isinstance(error, kind):
            return f"{summary} ({type(error).__name__}: {text}); use smaller values"
    return f"out of memory ({text}); use a smaller --batch-size or layers"


def _resource_errors():
    """The errors that mean "too large": Python's, and TensorFlow's OOM once it is loaded."""
    errors = (MemoryError, RecursionError, OverflowError)
    tensorflow = sys.modules.get("tensorflow")
    oom = getattr(getattr(tensorflow, "errors", None), "ResourceExhaustedError", None)
    return errors + (oom,) if oom is not None else errors


def _run(command, function, *arguments):
    """Runs a command; a bad input, divergence or interruption ends in one line on stderr.

    A MemoryError, RecursionError, OverflowError or TensorFlow out-of-memory
    error (a size the checks let through) is bad input too: one line, exit
    2. Any other exception is a bug and keeps its traceback.
    """
    prog = " ".join(("python -m zoo", command)) if command else "python -m zoo"
    try:
        try:
            return function(*arguments)
        except _resource_errors() as error:
            print(f"{prog}: error: {_too_large(error)}", file=sys.stderr)
            return EXIT_BAD_INPUT
    except FloatingPointError as error:  # after OverflowError, which is one too
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
    if not argv or argv[0] not in COMMANDS + ("-h", "--help", "--version"):
        from zoo.experiments import main_job  # noqa: PLC0415 - parses before it starts TensorFlow

        return _run("", main_job.main, argv)
    parser = build_parser()
    if argv[0] == "benchmark":
        uci_benchmark_args.build_parser().parse_args(argv[1:])  # errors before TensorFlow
        flags.start_tensorflow_quietly()
        return _run("benchmark", _benchmark, argv[1:])
    args = parser.parse_args(argv)
    # Only now, with the arguments read, does TensorFlow start.
    flags.start_tensorflow_quietly()
    if args.command == "list":
        return _list()
    if args.command == "train":
        return _run("train", _train, args)
    return _run("evaluate", _evaluate, args)

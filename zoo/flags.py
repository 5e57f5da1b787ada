"""The --epochs / --seed / --samples flags every zoo command takes, and --out."""

import pathlib


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
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative int, got {args.seed}")


def write_report(path, markdown):
    """Writes a command's Markdown report to `path` (the --out flag) and says so."""
    if path is not None:
        pathlib.Path(path).write_text(markdown, encoding="utf-8")
        print(f"wrote {path}")

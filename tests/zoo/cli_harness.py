"""Running `python -m zoo` in-process for the bad-input and hostile-input matrices."""

from zoo import cli


def snapshot(root):
    """Every path under `root`, relative and sorted: what a command left behind."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run_cli(argv):
    """`zoo.cli.main(argv)`'s exit code; argparse's own errors exit through SystemExit."""
    try:
        return cli.main(argv)
    except SystemExit as exit_info:
        return exit_info.code

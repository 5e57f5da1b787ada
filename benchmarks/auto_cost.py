"""What `--model auto`'s search costs by data size: its steps, and minutes from a step rate.

    python benchmarks/auto_cost.py            # ~3-5 minutes on 2 CPU cores
    python benchmarks/auto_cost.py --quick    # smoke run: two sizes, two candidates

The search's work is fixed by the data's size, not by the machine
(`zoo.run.candidates`): each default candidate trains `max_epochs(rows)` epochs of
`steps_per_epoch(rows)` steps, unless early stopping ends it sooner. For each table size
(rows of the search's fit part, synthetic regression data of 8 features) this script
prints those steps, summed over the candidates, and an estimate of the wall time of a
search that runs every candidate to its end: each candidate's seconds per step are
measured on a short run at that size (`--steps` steps after a warm-up epoch, the same
`zoo.run.scoring.fit` path the search uses) and multiplied by its steps. Early stopping
and the validation checks are left out, so a real search is usually shorter on the steps
and a little longer on the checks; the refit of `auto`'s stack adds its members' runs
up to their best checks (2 to 4 members on the UCI sets).
"""

import argparse
import sys
import time

import _common  # first: TensorFlow's start-up notices off, the repository on sys.path
import keras
import numpy as np

from zoo.run import scoring
from zoo.run.candidates import CANDIDATES

SIZES = (1_000, 3_200, 8_000, 12_800, 40_000)
QUICK_SIZES = (200, 5_000)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=list(SIZES),
                        help="fit-part sizes to cost (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=200,
                        help="timed steps per candidate and size")
    parser.add_argument("--candidates", type=int, default=len(CANDIDATES),
                        help="cost the first N default candidates (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: sizes 200 and 5,000, 10 timed steps, 2 candidates")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.steps, args.candidates = list(QUICK_SIZES), 10, 2
    _common.require_positive(parser, args, ("steps", "candidates"))
    if min(args.rows) < 2:
        parser.error(f"--rows must all be >= 2, got {min(args.rows)}")
    return args


def seconds_per_step(candidate, rows, steps, seed=0):
    """Seconds per training step of `candidate` on a table of `rows` rows: about `steps`
    steps timed in one `fit` after a one-batch warm-up fit (tracing)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8)).astype("float32")
    y = (np.sin(x[:, 0]) + 0.1 * rng.normal(size=rows)).astype("float32")
    batch = candidate.batch_for(rows)
    model = candidate.build((8,), rows, seed, 10 * steps)
    scoring.fit(model, x[:batch], y[:batch], 1, batch, seed=seed, seeded_batches=True)
    timed_rows = min(rows, steps * batch)  # `steps` steps of full batches where there are
    epochs = max(1, steps * batch // timed_rows)
    begin = time.perf_counter()
    scoring.fit(model, x[:timed_rows], y[:timed_rows], epochs, batch, seed=seed,
                seeded_batches=True)
    seconds = time.perf_counter() - begin
    keras.backend.clear_session()
    return seconds / (epochs * candidate.steps_per_epoch(timed_rows))


def main(argv=None):
    args = parse_args(argv)
    print("== cost of auto's search by data size (every candidate run to its end) ==")
    print(f"{'fit rows':>9} {'batch':>7} {'epochs':>7} {'steps':>9} {'est. min':>9}   slowest")
    for rows in args.rows:
        total_steps, total_seconds, slowest = 0, 0.0, (0.0, "")
        for candidate in CANDIDATES[:args.candidates]:
            steps = candidate.max_epochs(rows) * candidate.steps_per_epoch(rows)
            seconds = steps * seconds_per_step(candidate, rows, args.steps)
            total_steps += steps
            total_seconds += seconds
            slowest = max(slowest, (seconds, candidate.name))
        first = CANDIDATES[0]
        print(f"{rows:>9,} {first.batch_for(rows):>7} {first.max_epochs(rows):>7} "
              f"{total_steps:>9,} {total_seconds / 60:>9.1f}   {slowest[1]} "
              f"({slowest[0] / 60:.1f} min)", flush=True)
    print(f"({args.candidates} candidates; batch and epochs of the first; steps summed over "
          "the candidates; "
          "est. min = sum of steps x each candidate's measured seconds per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

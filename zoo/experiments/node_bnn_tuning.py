"""Choosing the node-BNN settings on held-out training data.

    python -m zoo.experiments.node_bnn_tuning [--epochs N] [--architectures mlp,cnn] [--out F]

The covariate-shift benchmark (`zoo.experiments.covariate_shift`) must not pick its
settings on the test images it reports. This command holds out a
stratified 20% of the *training* digits as a validation set, corrupts it
with every corruption of `tfp_bnn.data.corruptions` at the intensities the
benchmark's goal is about (3-5) using a corruption seed the test set never
uses, trains each node-BNN variant on the remaining 80% for every setting
of `GRID`, and ranks the settings by the mean validation NLL over the
shifted sets (clean validation NLL, accuracy and ECE are reported too).
The winners are what `zoo.models.node_bnn.TUNED` holds.

Example:
One variant and setting for one epoch (the benchmark: both architectures
and posteriors over the whole `GRID`, 60 epochs):

>>> result = tune(epochs=1, num_samples=2, architectures=("mlp",), posteriors=("gaussian",),
...               grid={"prior_stddev": (0.5,), "entropy_weight": (5.0,)}, intensities=(3,))
fit 1151 / validation 287 digits (test images unused), 1 epochs, seed 0, T = 2, 1 settings
mlp/gaussian {'entropy_weight': 5.0, 'prior_stddev': 0.5}: validation NLL shifted ...
>>> print(result["markdown"])
Validation = 20% of the training digits (seed 0), ...
"""

import itertools
import sys
import time

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data.digits import load_digits
from tfp_bnn.data.digits import stratified_split
from zoo.models import digits as digits_models
from zoo.models import node_bnn
from zoo.experiments.covariate_shift import NUM_SAMPLES
from zoo.experiments.covariate_shift import evaluate_under_shift
from zoo.run import report
from zoo.run import flags

# s of the N(1, s^2) node prior and gamma of KL - gamma * H: the two settings
# that decide how wide the node posterior stays (Trinh et al. 2022, sec. 4).
# A first 2 x 2 search over s in (0.25, 0.5), gamma in (1, 5) preferred
# gamma = 5 for all four variants, at the edge of that grid, so this grid
# drops gamma = 1 and extends both settings past the winners (BENCHMARKS.md).
GRID = {"prior_stddev": (0.25, 0.5, 1.0), "entropy_weight": (5.0, 10.0)}
ARCHITECTURES = ("mlp", "cnn")
POSTERIORS = ("flow", "gaussian")
SHIFT_INTENSITIES = (3, 4, 5)
VALIDATION_FRACTION = 0.2
# Validation corruptions draw their random parameters from a stream that the
# benchmark's test corruptions (seeded with the run's seed) never use.
CORRUPTION_SEED_OFFSET = 1000

_BUILDERS = {"mlp": node_bnn.node_bnn_mlp, "cnn": node_bnn.node_bnn_cnn}


def validation_split(data: dict, fraction: float = VALIDATION_FRACTION, seed: int = 0) -> dict:
    """Splits the training part of `data` into a fit part and a validation part.

    Returns a dict in the layout `load_digits` uses, with the fit part as
    `x_train`/`y_train` and the validation part as `x_test`/`y_test`, so the
    training and evaluation code of the benchmark runs on it unchanged. The
    test images of `data` are not in it.
    """
    for key in ("x_train", "y_train"):
        if key not in data:
            raise ValueError(f"`data` needs the key {key!r}; it has {sorted(data)}.")
    fit, held_out = stratified_split(data["y_train"], test_fraction=fraction, seed=seed)
    return {"x_train": data["x_train"][fit], "y_train": data["y_train"][fit],
            "x_test": data["x_train"][held_out], "y_test": data["y_train"][held_out]}


def settings(grid: dict = GRID) -> list:
    """Every combination of `grid` (dict name -> values) as a list of dicts."""
    if not isinstance(grid, dict) or not grid:
        raise ValueError(f"`grid` must be a non-empty dict name -> values, got {grid!r}.")
    for name, values in grid.items():
        if name not in ("prior_stddev", "entropy_weight"):
            raise ValueError(f"`grid` has an unknown setting {name!r}; "
                             "tunable: prior_stddev, entropy_weight.")
        if not values:
            raise ValueError(f"`grid[{name!r}]` lists no value.")
    names = sorted(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def tune(epochs=digits_models.EPOCHS, seed=0, num_samples=NUM_SAMPLES,
         architectures=ARCHITECTURES, posteriors=POSTERIORS, grid=GRID,
         intensities=SHIFT_INTENSITIES):
    """Trains every variant x setting on the fit split and scores it on validation.

    Returns:
        dict with `rows` (one per architecture, posterior and setting: the
        setting, `shift_nll` (mean NLL over corruptions x `intensities`),
        `clean_nll`, `shift_accuracy`, `shift_ece`, `train_seconds`),
        `best` (dict (architecture, posterior) -> winning setting),
        `markdown` and `seconds`.
    """
    architectures = check.subset("architectures", architectures, ARCHITECTURES)
    posteriors = check.subset("posteriors", posteriors, POSTERIORS)
    candidates = settings(grid)
    start = time.perf_counter()
    split = validation_split(load_digits(seed=seed), seed=seed)
    num_train = len(split["x_train"])
    print(f"fit {num_train} / validation {len(split['x_test'])} digits (test images unused), "
          f"{epochs} epochs, seed {seed}, T = {num_samples}, {len(candidates)} settings",
          flush=True)
    rows = []
    for architecture, posterior, setting in itertools.product(architectures, posteriors,
                                                              candidates):
        model = _BUILDERS[architecture](**digits_models.DIGITS, num_train=num_train,
                                        posterior=posterior, seed=seed, **setting)
        begin = time.perf_counter()
        digits_models.train(model, split, epochs=epochs, seed=seed)
        seconds = time.perf_counter() - begin
        scored = evaluate_under_shift({"model": model}, split, intensities=intensities,
                                      num_samples=num_samples,
                                      seed=seed + CORRUPTION_SEED_OFFSET)
        shifted = [row for row in scored if row["intensity"] > 0]
        clean = [row for row in scored if row["intensity"] == 0][0]
        row = {"architecture": architecture, "posterior": posterior, **setting,
               "shift_nll": float(np.mean([r["nll"] for r in shifted])),
               "shift_accuracy": float(np.mean([r["accuracy"] for r in shifted])),
               "shift_ece": float(np.mean([r["ece"] for r in shifted])),
               "clean_nll": clean["nll"], "train_seconds": seconds}
        rows.append(row)
        print(f"{architecture}/{posterior} {setting}: validation NLL shifted "
              f"{row['shift_nll']:.3f}, clean {row['clean_nll']:.3f} ({seconds:.0f} s)",
              flush=True)
    best = {}
    for row in rows:
        key = (row["architecture"], row["posterior"])
        if key not in best or row["shift_nll"] < best[key]["shift_nll"]:
            best[key] = row
    best = {key: {name: row[name] for name in sorted(grid)} for key, row in best.items()}
    return {"rows": rows, "best": best, "markdown": format_table(rows, grid, seed, epochs),
            "seconds": time.perf_counter() - start}


def format_table(rows: list, grid: dict = GRID, seed: int = 0, epochs: int = 0) -> str:
    """Markdown: one line per variant and setting, the winner of each variant in bold."""
    names = sorted(grid)
    winners = {}
    for index, row in enumerate(rows):
        key = (row["architecture"], row["posterior"])
        if key not in winners or row["shift_nll"] < rows[winners[key]]["shift_nll"]:
            winners[key] = index
    header = (["model"] + names
              + ["val. NLL shifted 3-5", "val. NLL clean", "acc. shifted", "ECE shifted",
                 "train s"])
    lines = [f"Validation = 20% of the training digits (seed {seed}), corrupted with a "
             f"separate corruption seed; {epochs} epochs on the other 80%.", "",
             "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for index, row in enumerate(rows):
        bold = "**" if winners[(row["architecture"], row["posterior"])] == index else ""
        cells = [f"node_bnn_{row['architecture']}_{row['posterior']}"]
        cells += [f"{row[name]:g}" for name in names]
        cells += [f"{bold}{row['shift_nll']:.3f}{bold}", f"{row['clean_nll']:.3f}",
                  f"{100 * row['shift_accuracy']:.1f}", f"{row['shift_ece']:.3f}",
                  f"{row['train_seconds']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _show(result):
    return report.show(result, [f"best node_bnn_{architecture}_{posterior}: {setting}"
                                for (architecture, posterior), setting in result["best"].items()])


def main(argv=None):
    """Entry point of `python -m zoo.experiments.node_bnn_tuning`; returns the exit code."""
    parser = flags.run_parser(
        "python -m zoo.experiments.node_bnn_tuning",
        "Choose the node-BNN prior width and entropy weight on corrupted validation digits "
        "held out of the training set.", digits_models.EPOCHS, NUM_SAMPLES,
        "training epochs per model", "seed of the splits, weights and validation corruptions",
        "Monte Carlo samples per prediction")
    parser.add_argument("--architectures", default=",".join(ARCHITECTURES),
                        help="comma-separated subset of mlp,cnn")
    parser.add_argument("--posteriors", default=",".join(POSTERIORS),
                        help="comma-separated subset of flow,gaussian")
    parser.add_argument("--out", default=None, metavar="FILE.md",
                        help="also write the Markdown table to this file")
    args = parser.parse_args(argv)
    flags.check_run_flags(parser, args)
    chosen = {}
    for flag, allowed in (("architectures", ARCHITECTURES), ("posteriors", POSTERIORS)):
        values = [v.strip() for v in getattr(args, flag).split(",") if v.strip()]
        if not values or any(v not in allowed for v in values):
            parser.error(f"--{flag} must name some of {','.join(allowed)}, "
                         f"got {getattr(args, flag)!r}")
        chosen[flag] = values
    report.write(parser, args.out, lambda: _show(tune(
        epochs=args.epochs, seed=args.seed, num_samples=args.samples, **chosen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Choosing the post-hoc Bayesian CNNs' settings on held-out training data.

    python -m zoo.experiments.posthoc_tuning [--epochs N] [--samples T] [--seed S] [--out F]

The same protocol as `zoo.experiments.node_bnn_tuning`, for the two-stage models of
`zoo.models.posthoc`: a stratified 20% of the *training* digits is held out as validation,
corrupted with every corruption at intensities 3-5 using a corruption seed the test set
never uses; the deterministic CNN is trained once on the other 80% and every candidate
second stage starts from it. Candidates: MOPED `bayesianize` with each delta x fine-tuning
epochs of `GRID`, and the last-layer Laplace with each Hessian of `HESSIANS`. Each is ranked
by the mean validation NLL over the shifted sets, the criterion the node-BNN settings were
chosen by; the winners are what `zoo.models.posthoc` holds (DELTA, FINETUNE_EPOCHS,
HESSIAN). The test images are never read.

Example:
One candidate of each kind, a small CNN trained one epoch (the benchmark:
the whole `GRID` and both `HESSIANS`, 60 epochs):

>>> result = tune(epochs=1, num_samples=2, grid={"delta": (0.3,), "finetune_epochs": (0,)},
...               hessians=("kron",), intensities=(3,), filters=(4, 8), hidden_units=(16,))
fit 1151 / validation 287 digits (test images unused), 1 epochs, seed 0, T = 2
bayesianized_cnn {'delta': 0.3, 'finetune_epochs': 0}: validation NLL shifted ...
laplace_cnn {'hessian': 'kron'}: validation NLL shifted ...
>>> [row["model"] for row in result["rows"]]
['deterministic_cnn', 'bayesianized_cnn', 'laplace_cnn']
>>> print(result["markdown"])
Validation = 20% of the training digits (seed 0), ...
"""

import itertools
import sys
import time

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data.digits import load_digits
from tfp_bnn.laplace import curvature
from zoo.experiments.covariate_shift import NUM_SAMPLES
from zoo.experiments.covariate_shift import evaluate_under_shift
from zoo.experiments.node_bnn_tuning import CORRUPTION_SEED_OFFSET
from zoo.experiments.node_bnn_tuning import SHIFT_INTENSITIES
from zoo.experiments.node_bnn_tuning import validation_split
from zoo.models import digits as digits_models
from zoo.models import posthoc
from zoo.run import flags
from zoo.run import report

# 0 fine-tuning epochs is the converted network as it starts. A first grid, delta in
# (0.01, 0.03, 0.1, 0.3) (MOPED's 0.1 and neighbours) x epochs in (0, 2, 5, 10), preferred
# delta 0.3 with 10 epochs, at both edges; this grid extends both past it (BENCHMARKS.md).
GRID = {"delta": (0.3, 0.5, 1.0), "finetune_epochs": (0, 10, 20)}
HESSIANS = ("kron", "full")


def _scores(model, split, num_samples, seed, intensities):
    """Validation NLL shifted / clean, accuracy and ECE shifted of one trained model."""
    rows = evaluate_under_shift({"model": model}, split, intensities=intensities,
                                num_samples=num_samples, seed=seed + CORRUPTION_SEED_OFFSET)
    shifted = [row for row in rows if row["intensity"] > 0]
    return {"shift_nll": float(np.mean([r["nll"] for r in shifted])),
            "clean_nll": rows[0]["nll"],
            "shift_accuracy": float(np.mean([r["accuracy"] for r in shifted])),
            "shift_ece": float(np.mean([r["ece"] for r in shifted]))}


def tune(epochs=digits_models.EPOCHS, seed=0, num_samples=NUM_SAMPLES, grid=GRID,
         hessians=HESSIANS, intensities=SHIFT_INTENSITIES, **overrides):
    """Trains the base CNN on the fit split once, scores every second stage on validation.

    Args:
        epochs, seed, num_samples: stage 1's epochs, the seed of split, weights, noise and
            (offset) validation corruptions, T.
        grid: dict with `delta` and `finetune_epochs` value tuples.
        hessians: Laplace Hessians to compare.
        intensities: the validation corruption intensities.
        **overrides: `deterministic_cnn` arguments (a smaller CNN for tests).

    Returns:
        dict with `rows` (the base CNN's, `seconds` its training, then one per candidate:
        `model`, `setting`, the `_scores`, `seconds` of its second stage), `best` (dict model -> winning setting),
        `markdown` and `seconds`.
    """
    if not isinstance(grid, dict) or set(grid) != {"delta", "finetune_epochs"} or not all(
            grid.values()):
        raise ValueError(f"`grid` must give values of delta and finetune_epochs, got {grid!r}.")
    # Checked before the stage-1 training, not after it.
    for delta in grid["delta"]:
        check.positive("delta", delta)
    for count in grid["finetune_epochs"]:
        check.integer("finetune_epochs", count, minimum=0)
    hessians = check.subset("hessians", hessians, curvature.STRUCTURES)
    start = time.perf_counter()
    split = validation_split(load_digits(seed=seed), seed=seed)
    print(f"fit {len(split['x_train'])} / validation {len(split['x_test'])} digits (test "
          f"images unused), {epochs} epochs, seed {seed}, T = {num_samples}", flush=True)
    begin = time.perf_counter()
    base = digits_models.BuildAndTrain(digits_models.deterministic_cnn, **overrides)(
        split, epochs=epochs, seed=seed).model
    rows = [{"model": "deterministic_cnn", "setting": {}, "seconds": time.perf_counter() - begin,
             **_scores(base, split, 1, seed, intensities)}]
    candidates = [("bayesianized_cnn", {"delta": delta, "finetune_epochs": count})
                  for delta, count in itertools.product(grid["delta"], grid["finetune_epochs"])]
    candidates += [("laplace_cnn", {"hessian": hessian}) for hessian in hessians]
    for name, setting in candidates:
        begin = time.perf_counter()
        if name == "bayesianized_cnn":
            model, _ = posthoc.moped_finetune(base, split, delta=setting["delta"],
                                              epochs=setting["finetune_epochs"], seed=seed)
        else:
            model, _, _ = posthoc.laplace_head(base, split, hessian=setting["hessian"],
                                               seed=seed)
        row = {"model": name, "setting": setting, "seconds": time.perf_counter() - begin,
               **_scores(model, split, num_samples, seed, intensities)}
        rows.append(row)
        print(f"{name} {setting}: validation NLL shifted {row['shift_nll']:.3f}, clean "
              f"{row['clean_nll']:.3f} ({row['seconds']:.1f} s)", flush=True)
    return {"rows": rows,
            "best": {name: rows[index]["setting"] for name, index in _winners(rows).items()},
            "markdown": format_table(rows, seed, epochs),
            "seconds": time.perf_counter() - start}


def _winners(rows):
    """Model -> the index of its candidate row with the lowest shifted validation NLL."""
    winners = {}
    for index, row in enumerate(rows):
        name = row["model"]
        if row["setting"] and (name not in winners
                               or row["shift_nll"] < rows[winners[name]]["shift_nll"]):
            winners[name] = index
    return winners


def format_table(rows: list, seed: int = 0, epochs: int = 0) -> str:
    """Markdown: one line per candidate, the winner of each model in bold."""
    winners = _winners(rows)
    header = ["model", "setting", "val. NLL shifted 3-5", "val. NLL clean", "acc. shifted",
              "ECE shifted", "train s"]
    lines = [f"Validation = 20% of the training digits (seed {seed}), corrupted with a "
             f"separate corruption seed; stage 1: {epochs} epochs on the other 80% (train s: "
             "stage 1 for deterministic_cnn, else the second stage alone).", "",
             "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for index, row in enumerate(rows):
        bold = "**" if winners.get(row["model"]) == index else ""
        setting = ", ".join(f"{key} {value:g}" if not isinstance(value, str)
                            else f"{key} {value}" for key, value in row["setting"].items())
        lines.append(f"| {row['model']} | {setting or '–'} | {bold}{row['shift_nll']:.3f}"
                     f"{bold} | {row['clean_nll']:.3f} | {100 * row['shift_accuracy']:.1f} | "
                     f"{row['shift_ece']:.3f} | {row['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def _show(result):
    return report.show(result, [f"best {name}: {setting}"
                                for name, setting in result["best"].items()])


def main(argv=None):
    """Entry point of `python -m zoo.experiments.posthoc_tuning`; returns the exit code."""
    parser = flags.run_parser(
        "python -m zoo.experiments.posthoc_tuning",
        "Choose MOPED's delta and fine-tuning epochs and the Laplace Hessian of the post-hoc "
        "Bayesian digits CNNs on corrupted validation digits held out of the training set.",
        digits_models.EPOCHS, NUM_SAMPLES, "stage 1 training epochs",
        "seed of the split, weights and validation corruptions",
        "Monte Carlo samples per prediction")
    parser.add_argument("--out", default=None, metavar="FILE.md",
                        help="also write the Markdown table to this file")
    args = parser.parse_args(argv)
    flags.check_run_flags(parser, args)
    report.write(parser, args.out, lambda: _show(
        tune(epochs=args.epochs, seed=args.seed, num_samples=args.samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

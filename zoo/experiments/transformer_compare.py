"""Bayesian transformers trained by sampling vs by moment propagation (`python -m zoo.experiments.transformer_compare`).

Two tasks, each trained once per path with the same network, seed and
epochs, and scored on held-out data in the data's own units:

- `sunspots`: the Zurich monthly sunspot numbers (packaged); a window of
  the past `window` months -> the next month. The last `test_months`
  months are the test period (the future of every training window).
- `concrete`: UCI concrete strength (packaged), each of the 8 features a
  token, a seeded random 90/10 split, inputs and target standardised with
  training statistics (Hernandez-Lobato and Adams 2015).

Reported: test log-likelihood (nats per point), RMSE, coverage of the 95%
predictive interval, training and prediction seconds. Monte Carlo
prediction uses T weight samples (`tfp_bnn.predict.regression`); the
moment path predicts in one deterministic pass.
"""

import argparse
import sys
import time

from tfp_bnn.data import Standardizer
from tfp_bnn.data import forecasting_split
from tfp_bnn.data import load_concrete
from tfp_bnn.data import load_sunspots
from tfp_bnn.data import train_test_split
from zoo.models import transformer as transformer_models
from zoo.run import flags
from zoo.run.flags import add_run_flags
from zoo.run.flags import check_run_flags

TASKS = ("sunspots", "concrete")
EPOCHS = {"sunspots": 30, "concrete": 150}
WINDOW = 24
TEST_MONTHS = 240
NUM_SAMPLES = 100
PATHS = (("mc", "diagonal"), ("moments", "diagonal"))


def sunspots_data(window=WINDOW, test_months=TEST_MONTHS):
    """Forecasting windows of the packaged sunspots and the target's scale."""
    _, values = load_sunspots()
    split = forecasting_split(values, window, test_months)
    scaler = split.pop("scaler")
    return split, float(scaler.mean[()]), float(scaler.std[()])


def concrete_data(seed=0):
    """Standardised concrete features (the tokens) and strength, 90/10 split."""
    x, y = load_concrete()
    train, test = train_test_split(len(y), test_fraction=0.1, seed=seed)
    x_scaler = Standardizer().fit(x[train])
    y_scaler = Standardizer().fit(y[train])
    split = {"x_train": x_scaler.transform(x[train]), "y_train": y_scaler.transform(y[train]),
             "x_test": x_scaler.transform(x[test]), "y_test": y_scaler.transform(y[test])}
    return split, float(y_scaler.mean[()]), float(y_scaler.std[()])


def run(task, epochs=None, seed=0, num_samples=NUM_SAMPLES, paths=PATHS):
    """Trains and scores one network per path on `task`; returns rows and Markdown."""
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    epochs = EPOCHS[task] if epochs is None else epochs
    if task == "sunspots":
        data, shift, scale = sunspots_data()
        num_tokens, pooling = WINDOW, "last"
        what = (f"monthly sunspots, window {WINDOW} months, test = last {TEST_MONTHS} months "
                f"({len(data['y_train'])} training windows)")
    else:
        data, shift, scale = concrete_data(seed)
        num_tokens, pooling = data["x_train"].shape[1], "mean"
        what = (f"UCI concrete, {num_tokens} feature tokens, 90/10 split seed {seed} "
                f"({len(data['y_train'])} train / {len(data['y_test'])} test)")
    start = time.perf_counter()
    rows = transformer_models.compare(data, num_tokens, epochs, pooling, seed=seed,
                                      num_samples=num_samples, paths=paths,
                                      y_shift=shift, y_scale=scale)
    lines = [f"{what}; {epochs} epochs, seed {seed}; MC prediction with T = {num_samples}.", "",
             "| training path | test LL (nats) | RMSE | 95% coverage | train s | predict s |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        name = "Monte Carlo (Flipout)" if row["path"] == "mc" else f"moments ({row['mode']})"
        lines.append(f"| {name} | {row['log_likelihood']:.3f} | {row['rmse']:.3f} | "
                     f"{100 * row['coverage']:.1f}% | {row['train_seconds']:.1f} | "
                     f"{row['predict_seconds']:.2f} |")
    return {"rows": rows, "markdown": "\n".join(lines) + "\n",
            "seconds": time.perf_counter() - start}


def main(argv=None):
    """Entry point of `python -m zoo.experiments.transformer_compare`; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m zoo.experiments.transformer_compare",
        description="Train a Bayesian transformer by Monte Carlo sampling and by moment "
                    "propagation; compare test log-likelihood, RMSE, coverage and time.")
    parser.add_argument("--task", choices=TASKS, default="sunspots")
    add_run_flags(parser, 0, NUM_SAMPLES,
                  "training epochs (default 0 = the task's own: "
                  + ", ".join(f"{k} {v}" for k, v in EPOCHS.items()) + ")",
                  "seed of weights, noise and the concrete split",
                  "Monte Carlo samples for the sampled path's prediction")
    parser.add_argument("--full", action="store_true",
                        help="also train with full covariances (slow for long windows)")
    parser.add_argument("--out", default=None, metavar="FILE.md")
    args = parser.parse_args(argv)
    if args.epochs == 0:
        args.epochs = EPOCHS[args.task]
    check_run_flags(parser, args)
    paths = PATHS + ((("moments", "full"),) if args.full else ())
    partial = flags.reserve_report(parser, args.out)
    try:
        result = run(args.task, epochs=args.epochs, seed=args.seed, num_samples=args.samples,
                     paths=paths)
        print(result["markdown"], end="")
        print(f"wall time {result['seconds']:.1f} s")
        flags.publish_report(partial, args.out, result["markdown"])
    finally:
        flags.discard_report(partial)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bayesian transformers trained by sampling vs by moment propagation.

    python -m zoo.experiments.transformer_compare [--task sunspots|concrete] [--full] [--out F]

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

import math
import sys
import time

import numpy as np

from tfp_bnn.data import Standardizer
from tfp_bnn.data import forecasting_split
from tfp_bnn.data import load_concrete
from tfp_bnn.data import load_sunspots
from tfp_bnn.data import train_test_split
from zoo.models import transformer as transformer_models
from zoo.run import report
from zoo.run import scoring
from zoo.run import flags

TASKS = ("sunspots", "concrete")
EPOCHS = {"sunspots": 30, "concrete": 150}
WINDOW = 24
TEST_MONTHS = 240
NUM_SAMPLES = 100
PATHS = (("mc", "diagonal"), ("moments", "diagonal"))
BATCH_SIZE = 64
PREDICT_BATCH_SIZE = 256


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


def compare(data, num_tokens, epochs, pooling, seed=0, num_samples=NUM_SAMPLES, width=16,
            num_heads=2, ff_dim=32, paths=PATHS, y_shift=0.0, y_scale=1.0):
    """Trains one network per (path, mode) and scores each on the test split.

    `data` holds standardised targets; `y_shift` and `y_scale` map them back
    to the data's units, where the scores are computed (`zoo.run.scoring`).

    Returns:
        list of dicts with `path`, `mode`, `train_seconds`,
        `predict_seconds`, `log_likelihood`, `rmse`, `coverage_95`,
        `mean_stddev`.
    """
    y_test = np.asarray(data["y_test"], np.float64) * y_scale + y_shift
    rows = []
    for path, mode in paths:
        model = transformer_models.build(num_tokens, path, mode=mode, pooling=pooling,
                                         width=width, num_heads=num_heads, ff_dim=ff_dim,
                                         seed=seed)
        scores, _ = scoring.fit_and_score(
            model, data["x_train"], data["y_train"], data["x_test"], y_test, epochs,
            BATCH_SIZE, num_samples, shift=y_shift, scale=y_scale, seed=seed,
            predict_batch_size=PREDICT_BATCH_SIZE)
        row = {"path": path, "mode": mode, **scores}
        if not all(math.isfinite(row[k]) for k in ("log_likelihood", "rmse")):
            raise FloatingPointError(f"{path}/{mode} training diverged: {row}")
        rows.append(row)
    return rows


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
    rows = compare(data, num_tokens, epochs, pooling, seed=seed,
                   num_samples=num_samples, paths=paths,
                   y_shift=shift, y_scale=scale)
    lines = [f"{what}; {epochs} epochs, seed {seed}; MC prediction with T = {num_samples}.", "",
             "| training path | test LL (nats) | RMSE | 95% coverage | train s | predict s |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        name = "Monte Carlo (Flipout)" if row["path"] == "mc" else f"moments ({row['mode']})"
        lines.append(f"| {name} | {row['log_likelihood']:.3f} | {row['rmse']:.3f} | "
                     f"{100 * row['coverage_95']:.1f}% | {row['train_seconds']:.1f} | "
                     f"{row['predict_seconds']:.2f} |")
    return {"rows": rows, "markdown": "\n".join(lines) + "\n",
            "seconds": time.perf_counter() - start}


def main(argv=None):
    """Entry point of `python -m zoo.experiments.transformer_compare`; returns the exit code."""
    parser = flags.run_parser(
        "python -m zoo.experiments.transformer_compare",
        "Train a Bayesian transformer by Monte Carlo sampling and by moment propagation; "
        "compare test log-likelihood, RMSE, coverage and time.", 0, NUM_SAMPLES,
        "training epochs (default 0 = the task's own: "
        + ", ".join(f"{k} {v}" for k, v in EPOCHS.items()) + ")",
        "seed of weights, noise and the concrete split",
        "Monte Carlo samples for the sampled path's prediction")
    parser.add_argument("--task", choices=TASKS, default="sunspots")
    parser.add_argument("--full", action="store_true",
                        help="also train with full covariances (slow for long windows)")
    parser.add_argument("--out", default=None, metavar="FILE.md")
    args = parser.parse_args(argv)
    if args.epochs == 0:
        args.epochs = EPOCHS[args.task]
    flags.check_run_flags(parser, args)
    paths = PATHS + ((("moments", "full"),) if args.full else ())
    report.write(parser, args.out, lambda: report.show(run(
        args.task, epochs=args.epochs, seed=args.seed, num_samples=args.samples, paths=paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bayesian transformers trained by sampling vs by moment propagation, and a Bayesian LSTM.

    python -m zoo.experiments.transformer_compare [--task sunspots|concrete] [--full]
        [--repeats N] [--out FILE.md | FILE.json]

Two tasks, each trained once per path with the same network, seed and
epochs, and scored on held-out data in the data's own units:

- `sunspots`: the Zurich monthly sunspot numbers (packaged); a window of
  the past `window` months -> the next month. The last `test_months`
  months are the test period (the future of every training window).
  A Bayesian LSTM forecaster (`zoo.models.lstm`) is trained beside the
  transformers with the same data, epochs, batch, optimizer, seed and
  scoring.
- `concrete`: UCI concrete strength (packaged), each of the 8 features a
  token, a seeded random 90/10 split, inputs and target standardised with
  training statistics (Hernandez-Lobato and Adams 2015).

Reported: test log-likelihood (nats per point), RMSE, coverage of the 95%
predictive interval, training and prediction seconds. Monte Carlo
prediction uses T weight samples (`tfp_bnn.predict.regression`); the
moment path predicts in one deterministic pass. `--repeats N` runs seeds
--seed .. --seed + N - 1 and reports mean ± standard error (sample s.d. /
sqrt(N)); an `--out` ending in .json gets every seed's rows as JSON.
"""

import json
import math
import sys
import time

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data import Standardizer
from tfp_bnn.data import forecasting_split
from tfp_bnn.data import load_concrete
from tfp_bnn.data import load_sunspots
from tfp_bnn.data import train_test_split
from zoo.models import lstm as lstm_models
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
LEARNING_RATE = 3e-3  # Adam's, for every row (the transformer's default)
LSTM_UNITS = 32
METRICS = ("log_likelihood", "rmse", "coverage_95", "train_seconds", "predict_seconds")


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
    rows = []
    for path, mode in paths:
        model = transformer_models.build(num_tokens, path, learning_rate=LEARNING_RATE,
                                         mode=mode, pooling=pooling, width=width,
                                         num_heads=num_heads, ff_dim=ff_dim, seed=seed)
        rows.append(_score(model, {"model": "transformer", "path": path, "mode": mode}, data,
                           epochs, seed, num_samples, y_shift, y_scale))
    return rows


def lstm_row(data, epochs, seed=0, num_samples=NUM_SAMPLES, units=LSTM_UNITS, y_shift=0.0,
             y_scale=1.0):
    """Trains `zoo.models.lstm.bayesian_lstm_forecaster` on `data` and scores it.

    The same protocol as `compare`: batch, optimizer, seed, KL / N, T samples
    and scores in the data's units (`zoo.run.scoring.fit_and_score`).

    Returns:
        a dict as `compare`'s rows, with `model` "lstm", `path` "mc".
    """
    model = lstm_models.bayesian_lstm_forecaster(
        data["x_train"].shape[1:], num_train=len(data["y_train"]), seed=seed, units=units,
        learning_rate=LEARNING_RATE)
    return _score(model, {"model": "lstm", "path": "mc", "mode": "diagonal"}, data, epochs,
                  seed, num_samples, y_shift, y_scale)


def _score(model, row, data, epochs, seed, num_samples, y_shift, y_scale):
    y_test = np.asarray(data["y_test"], np.float64) * y_scale + y_shift
    scores, _ = scoring.fit_and_score(
        model, data["x_train"], data["y_train"], data["x_test"], y_test, epochs, BATCH_SIZE,
        num_samples, shift=y_shift, scale=y_scale, seed=seed,
        predict_batch_size=PREDICT_BATCH_SIZE)
    row = {**row, **scores}
    if not all(math.isfinite(row[k]) for k in ("log_likelihood", "rmse")):
        raise FloatingPointError(f"{row['model']} {row['path']}/{row['mode']} training "
                                 f"diverged: {row}")
    return row


def row_name(row):
    """The table's name of a row of `compare` or `lstm_row`."""
    if row.get("model") == "lstm":
        return "LSTM, Monte Carlo (reparameterization)"
    return ("transformer, Monte Carlo (Flipout)" if row["path"] == "mc"
            else f"transformer, moments ({row['mode']})")


_HEADER = ["| model, training | test LL (nats) | RMSE | 95% coverage | train s | predict s |",
           "|---|---:|---:|---:|---:|---:|"]


def run(task, epochs=None, seed=0, num_samples=NUM_SAMPLES, paths=PATHS, lstm=None):
    """Trains and scores one network per path on `task`; returns rows and Markdown.

    `lstm` (default: True for sunspots) adds the Bayesian LSTM row; it reads
    windows, so the tabular concrete task has none.
    """
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    lstm = task == "sunspots" if lstm is None else check.boolean("lstm", lstm)
    if lstm and task != "sunspots":
        raise ValueError(f"`lstm` is for the sunspots windows, not task {task!r}.")
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
    if lstm:
        rows.append(lstm_row(data, epochs, seed=seed, num_samples=num_samples, y_shift=shift,
                             y_scale=scale))
    lines = [f"{what}; {epochs} epochs, seed {seed}; MC prediction with T = {num_samples}.", "",
             *_HEADER]
    for row in rows:
        lines.append(f"| {row_name(row)} | {row['log_likelihood']:.3f} | {row['rmse']:.3f} | "
                     f"{100 * row['coverage_95']:.1f}% | {row['train_seconds']:.1f} | "
                     f"{row['predict_seconds']:.2f} |")
    return {"task": task, "epochs": epochs, "seed": seed, "num_samples": num_samples,
            "what": what, "rows": rows, "markdown": "\n".join(lines) + "\n",
            "seconds": time.perf_counter() - start}


def summarize_seeds(runs):
    """Mean and standard error (sample s.d. / sqrt(n)) of each row's scores over seeds.

    Args:
        runs: `run` results of one task, one per seed, with the same rows.

    Returns:
        list of dicts: `model`, `path`, `mode`, `seeds`, and per metric of
        METRICS its mean and `<metric>_se`.
    """
    if len(runs) < 2:
        raise ValueError(f"`runs` needs at least 2 seeds, got {len(runs)}.")
    names = [[row_name(row) for row in result["rows"]] for result in runs]
    if any(n != names[0] for n in names):
        raise ValueError(f"every seed must have the same rows, got {names}.")
    summary = []
    for index, first in enumerate(runs[0]["rows"]):
        entry = {key: first[key] for key in ("model", "path", "mode")}
        entry["seeds"] = [result["seed"] for result in runs]
        for metric in METRICS:
            values = np.array([result["rows"][index][metric] for result in runs])
            entry[metric] = float(values.mean())
            entry[f"{metric}_se"] = float(values.std(ddof=1) / math.sqrt(len(values)))
        summary.append(entry)
    return summary


def run_seeds(task, seeds, epochs=None, num_samples=NUM_SAMPLES, paths=PATHS, lstm=None):
    """`run` once per seed; the rows' mean ± standard error as Markdown.

    Returns:
        dict with `runs` (each seed's `run` result), `summary`
        (`summarize_seeds`), `markdown` and `seconds`.
    """
    seeds = list(seeds)
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"`seeds` must list at least 2 distinct seeds, got {seeds!r}.")
    start = time.perf_counter()
    runs = [run(task, epochs, seed, num_samples, paths, lstm) for seed in seeds]
    summary = summarize_seeds(runs)
    lines = [f"{runs[0]['what']}; {runs[0]['epochs']} epochs; MC prediction with T = "
             f"{num_samples}. Mean ± standard error over seeds {', '.join(map(str, seeds))} "
             "(weights, noise and batch order; the concrete split too).", "", *_HEADER]
    for entry in summary:
        cells = [f"{entry[m]:{f}} ± {entry[m + '_se']:{f}}" for m, f in
                 (("log_likelihood", ".3f"), ("rmse", ".2f"))]
        cells.append(f"{100 * entry['coverage_95']:.1f} ± {100 * entry['coverage_95_se']:.1f}%")
        cells += [f"{entry['train_seconds']:.1f}", f"{entry['predict_seconds']:.2f}"]
        lines.append(f"| {row_name(entry)} | " + " | ".join(cells) + " |")
    return {"task": task, "runs": runs, "summary": summary,
            "markdown": "\n".join(lines) + "\n", "seconds": time.perf_counter() - start}


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
    parser.add_argument("--repeats", type=int, default=1,
                        help="run seeds --seed .. --seed + N - 1 and report mean ± s.e. "
                             "(default 1)")
    parser.add_argument("--out", default=None, metavar="FILE.md|FILE.json",
                        help="also write the report (.json: every seed's rows as JSON)")
    args = parser.parse_args(argv)
    if args.epochs == 0:
        args.epochs = EPOCHS[args.task]
    flags.check_run_flags(parser, args)
    if not 1 <= args.repeats <= 100:
        parser.error(f"--repeats must be an int in [1, 100], got {args.repeats}")
    paths = PATHS + ((("moments", "full"),) if args.full else ())

    def work():
        if args.repeats == 1:
            result = run(args.task, epochs=args.epochs, seed=args.seed,
                         num_samples=args.samples, paths=paths)
        else:
            result = run_seeds(args.task, range(args.seed, args.seed + args.repeats),
                               epochs=args.epochs, num_samples=args.samples, paths=paths)
        shown, text = report.show(result)
        if args.out is not None and args.out.endswith(".json"):
            text = json.dumps(result, indent=1) + "\n"
        return shown, text

    report.write(parser, args.out, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

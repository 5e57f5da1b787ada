"""Calibration under covariate shift on the 8x8 digits.

    python -m zoo.experiments.covariate_shift [--epochs N] [--models A,B] [--repeats R] [--out F]

The protocol of Ovadia et al. (2019), "Can you trust your model's
uncertainty?", on a problem two CPU cores train in seconds: every model is
trained on the clean digits of `tfp_bnn.data.load_digits`, then scored by
accuracy, NLL and ECE (15 bins) on the clean test set and on each
corruption x intensity of `tfp_bnn.data.corruptions` (CIFAR-10-C style,
intensities 1-5). A model whose predictive distribution knows what it does
not know keeps its NLL and ECE low as the accuracy falls.

Scores come from `tfp_bnn.predict.classification`: T Monte Carlo weight
samples for a model with stochastic layers, one pass (T = 1) for a
deterministic one, whose repeated passes would all be equal.

The models of the script are the trainers of `TRAINERS` (`zoo.models.digits`:
`trainer(data, epochs=, batch_size=, seed=)` -> `Trained`, with a Keras
classifier of logits output): the one-stage ones build and train a network;
`bayesianized_cnn` and `laplace_cnn` (`zoo.models.posthoc`) make a trained
deterministic CNN Bayesian. When the `deterministic_cnn` row was trained
before them in a run they start from its network (`STAGE1`), the very
weights they would train themselves with the same seed, and their train
seconds are its seconds plus their own second stage's.

Example:
Scoring a model (here an untrained small one) on the clean test digits and
one corruption:

>>> data = tfp_bnn.data.load_digits()
>>> model = digits_models.deterministic_mlp(**digits_models.DIGITS, num_train=1438)
>>> rows = evaluate_under_shift({"mlp": model}, data, corruptions=["rotation"],
...                             intensities=(3,))
>>> [(row["corruption"], row["intensity"]) for row in rows]
[('clean', 0), ('rotation', 3)]
>>> print(format_table(summarize(rows)).splitlines()[0])
NLL (nats, lower is better), by shift intensity (mean over the corruptions):
"""

import functools
import json
import sys
import time

import numpy as np

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn.data import corruptions as corruptions_lib
from tfp_bnn.data.digits import load_digits
from zoo.experiments.shift_tables import CLEAN
from zoo.experiments.shift_tables import METRICS
from zoo.experiments.shift_tables import aggregate_seeds
from zoo.experiments.shift_tables import format_table
from zoo.experiments.shift_tables import summarize
from zoo.models import digits as digits_models
from zoo.models import calibrated
from zoo.models import cheap_ensembles
from zoo.models import node_bnn
from zoo.models import posthoc
from zoo.models.digits import BuildAndTrain
from zoo.models.flipout import flipout_mlp
from zoo.run import report
from zoo.run import scoring
from zoo.run import flags

TRAINERS = {
    "deterministic_mlp": BuildAndTrain(digits_models.deterministic_mlp),
    "flipout_mlp": BuildAndTrain(flipout_mlp),
    "node_bnn_mlp_gaussian": BuildAndTrain(node_bnn.node_bnn_mlp_gaussian),
    "node_bnn_mlp_flow": BuildAndTrain(node_bnn.node_bnn_mlp_flow),
    "deterministic_cnn": BuildAndTrain(digits_models.deterministic_cnn),
    "flipout_cnn": BuildAndTrain(digits_models.flipout_cnn),
    "node_bnn_cnn_gaussian": BuildAndTrain(node_bnn.node_bnn_cnn_gaussian),
    "node_bnn_cnn_flow": BuildAndTrain(node_bnn.node_bnn_cnn_flow),
    "bayesianized_cnn": posthoc.bayesianized_cnn,
    "laplace_cnn": posthoc.laplace_cnn,
    "temperature_cnn": calibrated.temperature_cnn,
    "swag_cnn": cheap_ensembles.swag_cnn,
    "batch_ensemble_cnn": BuildAndTrain(cheap_ensembles.batch_ensemble_cnn),
    "packed_cnn": BuildAndTrain(cheap_ensembles.packed_cnn),
}
# The row whose trained network a two-stage row starts from (its `pretrained=`).
STAGE1 = {"bayesianized_cnn": "deterministic_cnn", "laplace_cnn": "deterministic_cnn"}

EPOCHS = digits_models.EPOCHS
BATCH_SIZE = digits_models.BATCH_SIZE
NUM_SAMPLES = 100


def samples_for(model, num_samples: int) -> int:
    """T for `model`: `num_samples`, 1 without stochastic layers, or M for an ensemble of
    M deterministic members (its exact mixture; `zoo.run.scoring.monte_carlo_samples`)."""
    return scoring.monte_carlo_samples(
        model, num_samples if tfp_bnn.bayesian_layers(model) else 1)


def score(model, x, y, num_samples):
    """Accuracy, NLL (nats) and ECE (15 bins) of the T-sample predictive."""
    scores, _ = scoring.score(model, x, y, "classification", num_samples)
    return {metric: scores[metric] for metric in METRICS}


def evaluate_under_shift(models, data, corruptions=None, intensities=corruptions_lib.INTENSITIES,
                         num_samples=NUM_SAMPLES, seed=0):
    """Scores every model on the clean and the corrupted test sets.

    Each corrupted test set is made once, with `seed`, and shared by all
    models, so they are scored on the very same images.

    Args:
        models: dict name -> trained Keras classifier with logits output.
        data: dict with `x_test` ([n, 8, 8, 1] in [0, 1]) and `y_test`, as
            `tfp_bnn.data.load_digits` returns.
        corruptions: names from `tfp_bnn.data.corruptions.CORRUPTIONS`; None
            for all of them.
        intensities: ints in 1..5.
        num_samples: T, Monte Carlo samples for models with stochastic
            layers (deterministic models use T = 1).
        seed: non-negative int seed of the corruptions.

    Returns:
        list of dicts, one per model and test set, with keys `model`,
        `corruption` ("clean" for the clean set), `intensity` (0 for the
        clean set), `accuracy`, `nll`, `ece` and `num_samples`; in order
        model, then clean, then corruption x intensity.
        len = len(models) * (1 + len(corruptions) * len(intensities)).

    Raises:
        ValueError: for an empty `models`, `data` without the test split,
            an unknown corruption, an intensity outside 1..5, or a bad
            `num_samples` or `seed`.
    """
    if not isinstance(models, dict) or not models:
        raise ValueError(f"`models` must be a non-empty dict name -> model, got {models!r}.")
    for key in ("x_test", "y_test"):
        if key not in data:
            raise ValueError(f"`data` needs the key {key!r}; it has {sorted(data)}.")
    names = check.subset("corruptions", list(corruptions_lib.CORRUPTIONS)
                         if corruptions is None else corruptions, corruptions_lib.CORRUPTIONS)
    levels = check.subset("intensities", [
        check.integer("intensities", value, 1, max(corruptions_lib.INTENSITIES))
        for value in intensities], corruptions_lib.INTENSITIES)
    num_samples = check.integer("num_samples", num_samples)
    x_test, y_test = data["x_test"], data["y_test"]
    test_sets = [(CLEAN, 0, np.asarray(x_test, dtype=np.float32))]
    for name in names:
        for level in levels:
            test_sets.append((name, level, corruptions_lib.corrupt(x_test, name, level, seed)))
    rows = []
    for model_name, model in models.items():
        samples = samples_for(model, num_samples)
        for corruption, level, x in test_sets:
            rows.append({"model": model_name, "corruption": corruption, "intensity": level,
                         **score(model, x, y_test, samples), "num_samples": samples})
    return rows


def train_models(names, data, epochs, batch_size, seed, trainers=None):
    """Trains the models `names` of `trainers` (default `TRAINERS`) on `data`; prints progress.

    A two-stage row of `STAGE1` gets the `Trained` of its stage-1 row as `pretrained=` when
    that row was trained before it; its train seconds then include that row's.

    Returns:
        (dict name -> `Trained`, dict name -> train seconds).
    """
    trainers = TRAINERS if trainers is None else trainers
    names = list(names)
    unknown = [name for name in names if name not in trainers]
    if unknown or not names:
        raise ValueError(f"`names` must be some of {list(trainers)}, got {names!r}.")
    trained, seconds = {}, {}
    for name in names:
        base = STAGE1.get(name)
        reuse = {"pretrained": trained[base]} if base in trained else {}
        begin = time.perf_counter()
        trained[name] = trainers[name](data, epochs=epochs, batch_size=batch_size, seed=seed,
                                       **reuse)
        seconds[name] = time.perf_counter() - begin + (seconds[base] if reuse else 0.0)
        model, history = trained[name].model, trained[name].history
        logs = {key: values[-1] for key, values in history.history.items()}
        print(f"{name}: {model.count_params()} parameters, trained in {seconds[name]:.1f} s"
              + (f" (from the {base} network)" if reuse else "")
              + f", final loss {logs['loss']:.3f}, train accuracy {logs['accuracy']:.3f}",
              flush=True)
    return trained, seconds


def run(epochs=EPOCHS, seed=0, num_samples=NUM_SAMPLES, names=None, batch_size=BATCH_SIZE,
        trainers=None):
    """Trains the models of `TRAINERS` (or `names` of them), scores them; prints progress.

    Args:
        trainers: dict name -> trainer replacing `TRAINERS` (e.g. smaller networks).

    Returns:
        dict with `rows`, `summary`, `train_seconds` (per model), `stage2_seconds` and
        `details` (the two-stage models' `Trained.details`), `markdown` (the report) and
        `seconds` (total wall time).
    """
    start = time.perf_counter()
    names = list(TRAINERS if trainers is None else trainers) if names is None else names
    data = load_digits(seed=seed)
    num_train = len(data["x_train"])
    print(f"digits 8x8: {num_train} train / {len(data['x_test'])} test, {epochs} epochs, "
          f"batch {batch_size}, seed {seed}, T = {num_samples}", flush=True)
    trained, train_seconds = train_models(names, data, epochs, batch_size, seed, trainers)
    details = {name: result.details for name, result in trained.items() if result.details}
    stage2_seconds = {name: entry["posthoc_seconds"] for name, entry in details.items()
                      if "posthoc_seconds" in entry}
    begin = time.perf_counter()
    rows = evaluate_under_shift({name: result.model for name, result in trained.items()},
                                data, num_samples=num_samples, seed=seed)
    evaluation_seconds = time.perf_counter() - begin
    summary = summarize(rows)
    corruption_names = ", ".join(corruptions_lib.CORRUPTIONS)
    markdown = (
        f"Digits 8x8 ({num_train} train / {len(data['x_test'])} test, seed {seed}), "
        f"{epochs} epochs, batch {batch_size}; T = {num_samples} Monte Carlo samples for "
        f"stochastic models. Corruptions: {corruption_names} "
        "(`tfp_bnn.data.corruptions`).\n\n"
        + format_table(summary, train_seconds, stage2_seconds)
    )
    return {"rows": rows, "summary": summary, "train_seconds": train_seconds,
            "stage2_seconds": stage2_seconds, "details": details,
            "evaluation_seconds": evaluation_seconds, "markdown": markdown,
            "seconds": time.perf_counter() - start}


def _mean_seconds(runs, key):
    """Per model, the mean over `runs` of each run's `key` dict (models of the first run)."""
    return {name: float(np.mean([r[key][name] for r in runs])) for name in runs[0][key]}


def run_seeds(seeds, epochs=EPOCHS, num_samples=NUM_SAMPLES, names=None,
              batch_size=BATCH_SIZE, trainers=None):
    """`run` once per seed (split, weights, noise, corruptions); mean ± s.e. tables.

    Returns:
        dict with `runs` (the `run` result of each seed), `summary` (the
        `aggregate_seeds` list), `train_seconds` and `stage2_seconds` (means per
        model), `markdown` and `seconds`.
    """
    seeds = list(seeds)
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"`seeds` must list at least 2 distinct seeds, got {seeds!r}.")
    start = time.perf_counter()
    runs = [run(epochs=epochs, seed=seed, num_samples=num_samples, names=names,
                batch_size=batch_size, trainers=trainers) for seed in seeds]
    summary = aggregate_seeds([result["summary"] for result in runs])
    train_seconds = _mean_seconds(runs, "train_seconds")
    stage2_seconds = _mean_seconds(runs, "stage2_seconds")
    markdown = (
        f"Digits 8x8, seeds {', '.join(map(str, seeds))} (each seed its own split, weights, "
        f"noise and corruptions), {epochs} epochs, batch {batch_size}; T = {num_samples}. "
        f"Mean ± standard error over the {len(seeds)} seeds; train s is the mean.\n\n"
        + format_table(summary, train_seconds, stage2_seconds)
    )
    return {"runs": runs, "summary": summary, "train_seconds": train_seconds,
            "stage2_seconds": stage2_seconds, "markdown": markdown,
            "seconds": time.perf_counter() - start}


def build_parser():
    parser = flags.run_parser(
        "python -m zoo.experiments.covariate_shift",
        "Train the digits classifiers of TRAINERS and print their accuracy, NLL and ECE on "
        "clean and corrupted test images as Markdown tables.", EPOCHS, NUM_SAMPLES,
        "training epochs per model", "seed of the split, weights, noise and corruptions",
        "Monte Carlo samples for stochastic models")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated subset of {', '.join(TRAINERS)} (default: all)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run seeds --seed .. --seed + N - 1 and report mean ± s.e. "
                             "(default 1)")
    parser.add_argument("--out", default=None, metavar="FILE.md|FILE.json",
                        help="also write the Markdown tables to this file (.json: the "
                             "whole result, every seed's rows, as JSON)")
    return parser


def _show(result, out=None):
    """Prints the report and the wall time; returns (result, the text `--out` gets)."""
    print()
    print(result["markdown"], end="")
    timing = f"wall time {result['seconds']:.1f} s (load, train, score; imports not counted)"
    if "evaluation_seconds" in result:
        timing = f"evaluation {result['evaluation_seconds']:.1f} s; {timing}"
    print(f"\n{timing}")
    if out is not None and out.endswith(".json"):
        return result, json.dumps(result, indent=1) + "\n"
    return result, result["markdown"]


def main(argv=None):
    """Entry point of `python -m zoo.experiments.covariate_shift`; returns the exit code.

    Args:
        argv: the command-line arguments (default `sys.argv[1:]`).

    Returns:
        0 on success; bad arguments exit with code 2 and one error line.

    Example:
    One small model for one epoch (the benchmark: every model, 60 epochs):

    >>> main(["--models", "deterministic_mlp", "--epochs", "1", "--samples", "2"])
    digits 8x8: 1438 train / 359 test, 1 epochs, batch 32, seed 0, T = 2
    ...
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    flags.check_run_flags(parser, args)
    names = None
    if args.models is not None:
        names = [name.strip() for name in args.models.split(",") if name.strip()]
        unknown = [name for name in names if name not in TRAINERS]
        if unknown or not names:
            parser.error(f"--models must name some of {', '.join(TRAINERS)}, got {args.models!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be a positive int, got {args.repeats}")
    if args.repeats == 1:
        work = functools.partial(run, seed=args.seed)
    else:
        work = functools.partial(run_seeds, range(args.seed, args.seed + args.repeats))
    report.write(parser, args.out, lambda: _show(
        work(epochs=args.epochs, num_samples=args.samples, names=names), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

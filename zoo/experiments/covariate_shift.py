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

Example:
>>> rows = evaluate_under_shift({"flipout_cnn": model}, tfp_bnn.data.load_digits())
>>> print(format_table(summarize(rows)))

The models of the script are those of `BUILDERS`; any function called as
`builder(num_train=N, seed=S)` that returns a compiled Keras classifier with
logits output can be added.
"""

import functools
import sys
import time

import numpy as np

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn.data import corruptions as corruptions_lib
from tfp_bnn.data.digits import load_digits
from zoo.models import digits as digits_models
from zoo.models import node_bnn
from zoo.models.flipout import flipout_mlp
from zoo.run import report
from zoo.run import scoring
from zoo.run import flags

BUILDERS = {
    "deterministic_mlp": digits_models.deterministic_mlp,
    "flipout_mlp": flipout_mlp,
    "node_bnn_mlp_gaussian": node_bnn.node_bnn_mlp_gaussian,
    "node_bnn_mlp_flow": node_bnn.node_bnn_mlp_flow,
    "deterministic_cnn": digits_models.deterministic_cnn,
    "flipout_cnn": digits_models.flipout_cnn,
    "node_bnn_cnn_gaussian": node_bnn.node_bnn_cnn_gaussian,
    "node_bnn_cnn_flow": node_bnn.node_bnn_cnn_flow,
}

EPOCHS = digits_models.EPOCHS
BATCH_SIZE = digits_models.BATCH_SIZE
NUM_SAMPLES = 100
METRICS = ("accuracy", "nll", "ece")
CLEAN = "clean"


def samples_for(model, num_samples: int) -> int:
    """T for `model`: `num_samples`, or 1 without stochastic layers."""
    return num_samples if tfp_bnn.bayesian_layers(model) else 1


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


def summarize(rows: list) -> list:
    """Per model and intensity, the mean of each metric over the corruptions.

    Args:
        rows: the list `evaluate_under_shift` returns.

    Returns:
        list of dicts with keys `model`, `intensity` (0 = clean),
        `accuracy`, `nll`, `ece` (means), `count` (rows averaged) and
        `num_samples`; models in order of first appearance, then by
        intensity.
    """
    groups = {}
    for row in rows:
        groups.setdefault((row["model"], row["intensity"]), []).append(row)
    order = {name: index for index, name in enumerate(dict.fromkeys(r["model"] for r in rows))}
    summary = []
    for (model, intensity), members in sorted(groups.items(),
                                              key=lambda item: (order[item[0][0]], item[0][1])):
        entry = {"model": model, "intensity": intensity}
        for metric in METRICS:
            entry[metric] = float(np.mean([member[metric] for member in members]))
        entry["count"] = len(members)
        entry["num_samples"] = members[0].get("num_samples")
        summary.append(entry)
    return summary


_TITLES = {
    "nll": ("NLL (nats, lower is better)", lambda v: f"{v:.3f}"),
    "accuracy": ("Accuracy (%, higher is better)", lambda v: f"{100 * v:.1f}"),
    "ece": ("ECE, 15 bins (lower is better)", lambda v: f"{v:.3f}"),
}


def _cell(entry, metric, fmt):
    """`fmt(value)`, with "± s.e." when the entry is a mean over seeds."""
    if entry is None:
        return "–"
    if f"{metric}_se" not in entry:
        return fmt(entry[metric])
    return f"{fmt(entry[metric])} ± {fmt(entry[metric + '_se'])}"


def aggregate_seeds(summaries: list) -> list:
    """Mean and standard error over seeds of each `summarize` entry.

    Args:
        summaries: one `summarize` list per seed (the same models and
            intensities in each).

    Returns:
        list of dicts like `summarize`'s, each metric the mean over seeds,
        with `<metric>_se` = sample std / sqrt(number of seeds) and `seeds`.
    """
    if len(summaries) < 2:
        raise ValueError(f"`summaries` needs at least 2 seeds, got {len(summaries)}.")
    keys = [[(e["model"], e["intensity"]) for e in summary] for summary in summaries]
    if any(k != keys[0] for k in keys):
        raise ValueError("every seed's summary must hold the same models and intensities.")
    aggregated = []
    for index, (model, intensity) in enumerate(keys[0]):
        entries = [summary[index] for summary in summaries]
        entry = {"model": model, "intensity": intensity, "seeds": len(entries),
                 "count": entries[0]["count"], "num_samples": entries[0]["num_samples"]}
        for metric in METRICS:
            values = np.array([e[metric] for e in entries])
            entry[metric] = float(values.mean())
            entry[f"{metric}_se"] = float(values.std(ddof=1) / np.sqrt(len(values)))
        aggregated.append(entry)
    return aggregated


def format_table(summary: list, train_seconds: dict | None = None) -> str:
    """Markdown tables, models x intensities, of NLL, accuracy and ECE.

    Column "clean" is intensity 0; columns 1-5 are means over the
    corruptions; "mean 1-5" is the mean over the shifted columns. With
    `train_seconds` (dict model -> seconds) a last table gives the training
    wall time and the Monte Carlo samples of each model.

    Args:
        summary: the list `summarize` returns.
        train_seconds: optional dict model name -> training seconds.

    Returns:
        str, Markdown for BENCHMARKS.md.
    """
    models = list(dict.fromkeys(entry["model"] for entry in summary))
    levels = sorted({entry["intensity"] for entry in summary})
    shifted = [level for level in levels if level > 0]
    values = {(e["model"], e["intensity"]): e for e in summary}
    header = ["model"] + [CLEAN if level == 0 else str(level) for level in levels]
    if shifted:
        header.append(f"mean {shifted[0]}-{shifted[-1]}" if len(shifted) > 1 else "mean")
    lines = []
    for metric in ("nll", "accuracy", "ece"):
        title, fmt = _TITLES[metric]
        lines += [f"{title}, by shift intensity (mean over the corruptions):", "",
                  "| " + " | ".join(header) + " |",
                  "|---|" + "---:|" * (len(header) - 1)]
        for model in models:
            cells = [_cell(values.get((model, level)), metric, fmt) for level in levels]
            if shifted:
                means = [values[model, level][metric] for level in shifted
                         if (model, level) in values]
                cells.append(fmt(float(np.mean(means))) if means else "–")
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    if train_seconds:
        samples = {e["model"]: e.get("num_samples") for e in summary}
        lines += ["| model | MC samples T | train s |", "|---|---:|---:|"]
        for model in models:
            seconds = train_seconds.get(model)
            lines.append(f"| {model} | {samples.get(model)} | "
                         + ("–" if seconds is None else f"{seconds:.1f}") + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def run(epochs=EPOCHS, seed=0, num_samples=NUM_SAMPLES, names=None, batch_size=BATCH_SIZE):
    """Trains the models of `BUILDERS` (or `names` of them), scores them; prints progress.

    Returns:
        dict with `rows`, `summary`, `train_seconds` (per model),
        `markdown` (the report) and `seconds` (total wall time).
    """
    start = time.perf_counter()
    names = list(BUILDERS) if names is None else list(names)
    unknown = [name for name in names if name not in BUILDERS]
    if unknown or not names:
        raise ValueError(f"`names` must be some of {list(BUILDERS)}, got {names!r}.")
    data = load_digits(seed=seed)
    num_train = len(data["x_train"])
    print(f"digits 8x8: {num_train} train / {len(data['x_test'])} test, {epochs} epochs, "
          f"batch {batch_size}, seed {seed}, T = {num_samples}", flush=True)
    models, train_seconds = {}, {}
    for name in names:
        model = BUILDERS[name](**digits_models.DIGITS, num_train=num_train, seed=seed)
        begin = time.perf_counter()
        history = digits_models.train(model, data, epochs=epochs, batch_size=batch_size,
                                      seed=seed)
        train_seconds[name] = time.perf_counter() - begin
        logs = {key: values[-1] for key, values in history.history.items()}
        print(f"{name}: {model.count_params()} parameters, trained in "
              f"{train_seconds[name]:.1f} s, final loss {logs['loss']:.3f}, "
              f"train accuracy {logs['accuracy']:.3f}", flush=True)
        models[name] = model
    begin = time.perf_counter()
    rows = evaluate_under_shift(models, data, num_samples=num_samples, seed=seed)
    evaluation_seconds = time.perf_counter() - begin
    summary = summarize(rows)
    corruption_names = ", ".join(corruptions_lib.CORRUPTIONS)
    markdown = (
        f"Digits 8x8 ({num_train} train / {len(data['x_test'])} test, seed {seed}), "
        f"{epochs} epochs, batch {batch_size}; T = {num_samples} Monte Carlo samples for "
        f"stochastic models. Corruptions: {corruption_names} "
        "(`tfp_bnn.data.corruptions`).\n\n" + format_table(summary, train_seconds)
    )
    return {"rows": rows, "summary": summary, "train_seconds": train_seconds,
            "evaluation_seconds": evaluation_seconds, "markdown": markdown,
            "seconds": time.perf_counter() - start}


def run_seeds(seeds, epochs=EPOCHS, num_samples=NUM_SAMPLES, names=None,
              batch_size=BATCH_SIZE):
    """`run` once per seed (split, weights, noise, corruptions); mean ± s.e. tables.

    Returns:
        dict with `runs` (the `run` result of each seed), `summary` (the
        `aggregate_seeds` list), `train_seconds` (mean per model), `markdown`
        and `seconds`.
    """
    seeds = list(seeds)
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"`seeds` must list at least 2 distinct seeds, got {seeds!r}.")
    start = time.perf_counter()
    runs = [run(epochs=epochs, seed=seed, num_samples=num_samples, names=names,
                batch_size=batch_size) for seed in seeds]
    summary = aggregate_seeds([result["summary"] for result in runs])
    train_seconds = {name: float(np.mean([r["train_seconds"][name] for r in runs]))
                     for name in runs[0]["train_seconds"]}
    markdown = (
        f"Digits 8x8, seeds {', '.join(map(str, seeds))} (each seed its own split, weights, "
        f"noise and corruptions), {epochs} epochs, batch {batch_size}; T = {num_samples}. "
        f"Mean ± standard error over the {len(seeds)} seeds; train s is the mean.\n\n"
        + format_table(summary, train_seconds)
    )
    return {"runs": runs, "summary": summary, "train_seconds": train_seconds,
            "markdown": markdown, "seconds": time.perf_counter() - start}


def build_parser():
    parser = flags.run_parser(
        "python -m zoo.experiments.covariate_shift",
        "Train the digits classifiers of BUILDERS and print their accuracy, NLL and ECE on "
        "clean and corrupted test images as Markdown tables.", EPOCHS, NUM_SAMPLES,
        "training epochs per model", "seed of the split, weights, noise and corruptions",
        "Monte Carlo samples for stochastic models")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated subset of {', '.join(BUILDERS)} (default: all)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run seeds --seed .. --seed + N - 1 and report mean ± s.e. "
                             "(default 1)")
    parser.add_argument("--out", default=None, metavar="FILE.md",
                        help="also write the Markdown tables to this file")
    return parser


def _show(result):
    print()
    print(result["markdown"], end="")
    timing = f"wall time {result['seconds']:.1f} s (load, train, score; imports not counted)"
    if "evaluation_seconds" in result:
        timing = f"evaluation {result['evaluation_seconds']:.1f} s; {timing}"
    print(f"\n{timing}")
    return result, result["markdown"]


def main(argv=None):
    """Entry point of `python -m zoo.experiments.covariate_shift`; returns the exit code.

    Example:
    >>> main(["--epochs", "5", "--samples", "10", "--out", "shift.md"])
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    flags.check_run_flags(parser, args)
    names = None
    if args.models is not None:
        names = [name.strip() for name in args.models.split(",") if name.strip()]
        unknown = [name for name in names if name not in BUILDERS]
        if unknown or not names:
            parser.error(f"--models must name some of {', '.join(BUILDERS)}, got {args.models!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be a positive int, got {args.repeats}")
    if args.repeats == 1:
        work = functools.partial(run, seed=args.seed)
    else:
        work = functools.partial(run_seeds, range(args.seed, args.seed + args.repeats))
    report.write(parser, args.out, lambda: _show(
        work(epochs=args.epochs, num_samples=args.samples, names=names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

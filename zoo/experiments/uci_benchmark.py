"""The UCI regression benchmark: 20 standard splits, scored as the papers do.

The protocol of Hernandez-Lobato and Adams (2015), kept by Gal and
Ghahramani (2016) and the papers since: for every train/test split of a
dataset (20 per dataset, 5 for protein), standardise inputs and target with
the training split's statistics, train the model, predict the test split
with T Monte Carlo samples and score it in the target's original units by

    RMSE = sqrt(mean (y - E[y])^2)           of the predictive mean
    LL   = mean_i log p(y_i | x_i, D)        the predictive mixture's density

then report the mean over splits +- its standard error std / sqrt(n_splits)
(np.std with ddof=0, so one split has error 0).

`python -m zoo benchmark uci --dataset DIR --model NAME` runs it; `run()`
is the same from Python, `format_table()` prints ours against `PUBLISHED`.

How `SETTINGS` were chosen (validation, never the test splits): for each
dataset, the training indices of standard splits 0 and 1 were cut into
their first 80% (fit) and last 20% (validation); candidate models and
settings were trained on the fit part (standardised with its own
statistics) and ranked by the validation log-likelihood in original units,
averaged over the two splits (`--validation` / `run(..., validation=True)`
repeats this). The test rows of every split were only used by the final
20-split run, once per dataset, after the settings were fixed. The few
candidates tried (CPU time was short) are listed next to `SETTINGS`.
"""

import json
import math
import os
import pathlib
import time

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data import UCIDataset
from zoo.run import datasets
from zoo.run import auto as auto_run
from zoo.run import report
from zoo.models import registry
from zoo.run import scoring
from zoo.experiments.uci_benchmark_args import build_parser
from zoo.experiments.uci_published import canonical_name
from zoo.experiments.uci_published import format_table

# Registry models that take a table and predict [mean, log variance].
REGRESSION_MODELS = tuple(sorted(name for name, spec in registry.SPECS.items()
                                 if "regression" in spec.tasks and "table" in spec.inputs))

# The standard protocol's split count where it is not 20.
_STANDARD_SPLITS = {"protein": 5}

# Settings for a dataset without its own entry: Gal and Ghahramani's
# architecture (one layer of 50) trained longer, with cosine decay.
DEFAULT_SETTINGS = {"epochs": 400, "batch_size": 32, "hidden_units": (50,),
                    "learning_rate": 3e-3}
# Model-specific additions to DEFAULT_SETTINGS.
_MODEL_DEFAULTS = {"mc_dropout_mlp": {"rate": 0.05},
                   "mc_dropout_mlp_heteroscedastic": {"rate": 0.05}}

# (dataset, model) -> training settings, chosen on validation data (see the
# module docstring; `run(..., validation=True)` reproduces the scores). Keys
# besides epochs and batch_size are passed to zoo.models.registry.build_model; every
# model also gets decay_steps = its total number of steps (cosine decay).
# The comment after each entry is its validation LL (mean of splits 0 and 1).
SETTINGS = {
    # -2.976. Own builder without input dropout, p = 0.05: 50 -3.087, 50-50 -2.943.
    ("concrete", "mc_dropout_mlp_heteroscedastic"): {
        "epochs": 500, "batch_size": 32, "hidden_units": (50, 50), "learning_rate": 3e-3,
        "rate": 0.01},
    # -0.620. Own builder, one layer of 50, p = 0.05 / 0.01: -1.215 / -0.920.
    ("energy", "mc_dropout_mlp_heteroscedastic"): {
        "epochs": 500, "batch_size": 32, "hidden_units": (50, 50), "learning_rate": 3e-3,
        "rate": 0.01},
    # 1.264. Heteroscedastic MC dropout, same layers, p = 0.005: 1.146.
    ("kin8nm", "flipout_mlp_heteroscedastic"): {
        "epochs": 150, "batch_size": 64, "hidden_units": (100, 100), "learning_rate": 3e-3},
    # -0.893. Homoscedastic mc_dropout_mlp: -0.925 (100 epochs), -0.918 (300, p = 0.1).
    ("wine-quality-red", "mc_dropout_mlp_heteroscedastic"): {
        "epochs": 100, "batch_size": 32, "hidden_units": (50,), "learning_rate": 1e-3,
        "rate": 0.05},
    # -0.925: the homoscedastic alternative, run on the 20 splits for comparison.
    ("wine-quality-red", "mc_dropout_mlp"): {
        "epochs": 100, "batch_size": 32, "hidden_units": (50,), "learning_rate": 1e-3,
        "rate": 0.05},
    # -0.652. 50 units, p = 0.05: -1.091 (dropping 5% of the 6 inputs hurts).
    ("yacht", "mc_dropout_mlp_heteroscedastic"): {
        "epochs": 1000, "batch_size": 32, "hidden_units": (100,), "learning_rate": 3e-3,
        "rate": 0.01},
}

# The model chosen per dataset on validation (`--model best`).
BEST_MODEL = {
    "concrete": "mc_dropout_mlp_heteroscedastic",
    "energy": "mc_dropout_mlp_heteroscedastic",
    "kin8nm": "flipout_mlp_heteroscedastic",
    "wine-quality-red": "mc_dropout_mlp_heteroscedastic",
    "yacht": "mc_dropout_mlp_heteroscedastic",
}

# Share of a training split held out for choosing settings.
VALIDATION_FRACTION = 0.2


def settings_for(dataset, model):
    """Training settings of `model` on `dataset` (a name), defaults if unlisted.

    Returns:
        dict with `epochs`, `batch_size` and the build_model overrides.
    """
    name = canonical_name(dataset)
    if (name, model) in SETTINGS:
        return dict(SETTINGS[(name, model)])
    settings = dict(DEFAULT_SETTINGS)
    settings.update(_MODEL_DEFAULTS.get(model, {}))
    return settings


def standard_error(values):
    """std / sqrt(n) of the per-split values (np.std, ddof=0); 0 for one split."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"`values` must be a non-empty 1-d sequence, got shape {values.shape}.")
    return float(np.std(values) / math.sqrt(values.size))


def load_dataset(dataset):
    """A `UCIDataset` from a directory in the UCI layout, or a packaged table's name.

    Packaged tables (concrete, energy, wine-quality-red, yacht) have no
    split files: 20 seeded 90/10 splits, not the standard ones.
    """
    if isinstance(dataset, UCIDataset):
        return dataset
    if isinstance(dataset, (str, os.PathLike)) and os.path.isdir(dataset):
        return UCIDataset(dataset)
    builtin = datasets.UCI_BUILTIN.get(canonical_name(dataset)) if isinstance(dataset, str) \
        else None
    if builtin is not None:
        return UCIDataset(builtin)
    raise ValueError(f"`dataset` must be a directory in the UCI layout, a UCIDataset or a "
                     f"packaged table's name, got {dataset!r} (no such directory).")


def default_num_splits(data):
    """All splits of the directory, or n_splits.txt's count (protein: 5)."""
    count = len(data.splits)
    limit = _STANDARD_SPLITS.get(canonical_name(data.name))
    n_file = pathlib.Path(data.path) / "n_splits.txt"
    if n_file.is_file():
        text = n_file.read_text(encoding="utf-8").split()
        if text and text[0].isdigit():
            limit = int(text[0])
    return min(count, limit) if limit else count


def validation_split(data, k, fraction=VALIDATION_FRACTION, dtype="float32"):
    """Split k's training rows cut into fit (first 1 - fraction) and validation (last).

    The test rows of split k are not touched, and the statistics come from
    the fit part only, so settings chosen on it have not seen test data.

    Returns:
        dict like `UCIDataset.split`: `x_train`, `y_train`, `x_test`,
        `y_test` (standardised; "test" is the validation part here),
        `y_test_raw`, `x_scaler`, `y_scaler`.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"`fraction` must be in (0, 1), got {fraction!r}.")
    train, _ = data.splits[k]
    cut = int(round(len(train) * (1 - fraction)))
    if not 0 < cut < len(train):
        raise ValueError(f"split {k} has {len(train)} training rows: too few to hold out "
                         f"{fraction:.0%}.")
    return data.standardized(train[:cut], train[cut:], dtype=dtype)


def _summary(values):
    return {"mean": float(np.mean(values)), "se": standard_error(values)}


def _run_auto(data, name, splits, seed, num_samples, budget_steps, budget_minutes, verbose):
    """`--model auto`: per split, `zoo.run.auto` chooses on that split's training rows only."""
    rows = []
    start = time.perf_counter()
    for k in range(splits):
        split_start = time.perf_counter()
        train, test = data.splits[k]
        result = auto_run.auto(data.x[train], data.y[train], data.x[test], data.y[test],
                               seed=seed + k, budget_steps=budget_steps,
                               budget_minutes=budget_minutes, num_samples=num_samples,
                               candidates=auto_run.CANDIDATES)
        selection = result.selection
        row = {"split": k, "rmse": result.scores["rmse"],
               "ll": result.scores["log_likelihood"],
               "seconds": time.perf_counter() - split_start,
               "chosen": selection.candidate.name, "selection": selection.to_json(),
               "refit": result.refit, "conformal": result.conformal}
        rows.append(row)
        if verbose:
            members = ", ".join(f"{m} {w:.2f}" for m, w in result.refit["members"].items())
            print(f"{name} auto split {k + 1:2d}/{splits}: {row['chosen']} (stack: {members}) "
                  f"({selection.epochs} epochs{', budget hit' if selection.budget_hit else ''}"
                  f"{', the search models kept' if result.refit['kept'] != 'refit' else ''})"
                  f"  RMSE {row['rmse']:.3f}  LL {row['ll']:.3f}  {row['seconds']:.0f}s",
                  flush=True)
        keras.backend.clear_session()
    settings = {"budget_steps": budget_steps, "budget_minutes": budget_minutes,
                "candidates": [c.to_json() for c in auto_run.CANDIDATES]}
    return {"dataset": name, "model": "auto", "settings": settings, "seed": seed,
            "validation": False, "num_samples": num_samples, "num_splits": splits,
            "rows": rows, "rmse": _summary([r["rmse"] for r in rows]),
            "ll": _summary([r["ll"] for r in rows]),
            "conformal": _conformal_summary(rows),
            "seconds": time.perf_counter() - start}


def _conformal_summary(rows):
    """Mean and s.e. over the splits of each interval score (splits without one left out)."""
    scored = [r["conformal"] for r in rows if r["conformal"] is not None]
    if not scored:
        return None
    keys = ("conformal_coverage", "conformal_width", "model_coverage", "model_width")
    return {"level": scored[0]["level"], "splits": len(scored),
            **{key: _summary([c[key] for c in scored]) for key in keys}}


def run(dataset, model, splits=None, epochs=None, seed=0, num_samples=100, verbose=True,
        validation=False, build_model=None, overrides=None,
        budget_steps=auto_run.DEFAULT_BUDGET_STEPS, budget_minutes=None):
    """Runs the benchmark protocol for one model on one dataset.

    Args:
        dataset: a directory in the UCI layout (with or without its data/
            subdirectory), a `tfp_bnn.data.UCIDataset`, or a packaged
            table's name.
        model: a regression model name of `zoo.models.registry`; "auto" to choose
            the model and its epochs per split from that split's training rows
            (`zoo.run.auto`); or "best" for the dataset's hand-chosen `BEST_MODEL`
            (the record behind BENCHMARKS.md's first UCI table).
        splits: number of splits to run (the first ones); None for the
            standard count (all of the directory's, 5 for protein).
        epochs: overrides the settings' epochs (e.g. for a smoke test).
        seed: int >= 0; split k builds its model with seed + k.
        num_samples: T, Monte Carlo samples of the test predictive.
        verbose: print one line per finished split.
        validation: score on `validation_split(data, k)` (the last 20% of
            split k's training rows) instead of split k's test rows: how
            SETTINGS were chosen. Default splits then 2.
        build_model: the model factory (`zoo.models.registry.build_model`'s
            signature), the registry's if None.
        overrides: dict replacing entries of the dataset's settings (e.g.
            {"hidden_units": (100,), "batch_size": 64}), for trying
            settings on validation.
        budget_steps: with model="auto", None or a cap on the training steps
            of each split's search (`zoo.run.auto.select`).
        budget_minutes: with model="auto", None or a wall-time cap of each
            split's search.

    Returns:
        dict with `dataset`, `model`, `settings`, `rows` (per split:
        `split`, `rmse`, `ll`, `seconds`), `rmse` and `ll` (each `mean`,
        `se`), `seconds` (total wall time) and the arguments.

    Example:
    One split of the packaged concrete table and one epoch (the protocol: 20
    splits, the epochs of `SETTINGS`); a directory in the UCI layout, such as
    a copy of the UCI repository's yacht, works the same way:

    >>> result = run("concrete", "mc_dropout_mlp_heteroscedastic", splits=1, epochs=1,
    ...              num_samples=10, verbose=False)
    >>> result["num_splits"], sorted(result["ll"])   # test log-likelihood, mean and s.e.
    (1, ['mean', 'se'])
    """
    data = load_dataset(dataset)
    name = canonical_name(data.name)
    if model == "best":
        if name not in BEST_MODEL:
            raise ValueError(f"`model`: no best model chosen for dataset {name!r}; "
                             f"known: {sorted(BEST_MODEL)}.")
        model = BEST_MODEL[name]
    if model not in REGRESSION_MODELS + ("auto",):
        raise ValueError(f"`model` must be one of {REGRESSION_MODELS}, 'auto' or 'best', got "
                         f"{model!r}.")
    available = len(data.splits)
    if splits is None:
        splits = 2 if validation else default_num_splits(data)
    splits = check.integer("splits", splits)
    if splits > available:
        raise ValueError(f"`splits` is {splits} but {data.path} has {available} splits.")
    seed = check.seed(seed)
    num_samples = check.integer("num_samples", num_samples)
    if model == "auto":
        unused = [key for key, value in (("epochs", epochs), ("build_model", build_model),
                                         ("overrides", overrides)) if value is not None]
        if validation or unused:
            raise ValueError(f"model 'auto' chooses its own settings on each split's training "
                             f"rows: `{'validation' if validation else unused[0]}` does not "
                             "apply.")
        budget_steps, budget_minutes = auto_run.check_budgets(budget_steps, budget_minutes)
        return _run_auto(data, name, splits, seed, num_samples, budget_steps, budget_minutes,
                         verbose)
    settings = settings_for(name, model)
    settings.update(overrides or {})
    if epochs is not None:
        settings["epochs"] = check.integer("epochs", epochs)
    if build_model is None:
        build_model = registry.build_model
    model_args = {k: v for k, v in settings.items() if k not in ("epochs", "batch_size")}
    rows = []
    start = time.perf_counter()
    for k in range(splits):
        split_start = time.perf_counter()
        part = validation_split(data, k) if validation else data.split(k)
        x, y = part["x_train"], part["y_train"]
        steps = math.ceil(len(x) / settings["batch_size"]) * settings["epochs"]
        # Seeds the initialisers of plain Keras layers and the shuffling too.
        keras.utils.set_random_seed(seed + k)
        net = build_model(model, x.shape[1:], task="regression", num_train=len(x),
                          seed=seed + k, decay_steps=steps, **model_args)
        scaler = part["y_scaler"]
        scores, _ = scoring.fit_and_score(
            net, x, y, part["x_test"], part["y_test_raw"], settings["epochs"],
            settings["batch_size"], num_samples, shift=float(scaler.mean),
            scale=float(scaler.std))
        row = {"split": k, "rmse": scores["rmse"], "ll": scores["log_likelihood"],
               "seconds": time.perf_counter() - split_start}
        rows.append(row)
        if verbose:
            print(f"{name} {model} {'validation' if validation else 'split'} "
                  f"{k + 1:2d}/{splits}: RMSE {row['rmse']:.3f}  "
                  f"LL {row['ll']:.3f}  {row['seconds']:.0f}s", flush=True)
        keras.backend.clear_session()
    return {"dataset": name, "model": model, "settings": settings, "seed": seed,
            "validation": bool(validation),
            "num_samples": num_samples, "num_splits": splits, "rows": rows,
            "rmse": _summary([r["rmse"] for r in rows]),
            "ll": _summary([r["ll"] for r in rows]),
            "seconds": time.perf_counter() - start}


def main(argv=None):
    """`python -m zoo benchmark uci ...`: runs, prints the table, writes --out.

    Returns:
        The `run()` result.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model not in REGRESSION_MODELS + ("auto", "best"):
        parser.error(f"--model: {args.model!r} is not a regression model of the zoo; choose "
                     f"one of {list(REGRESSION_MODELS)}, 'auto' or 'best'.")
    if args.model == "auto" and (args.validation or args.epochs is not None):
        parser.error(f"--model auto chooses its own settings on each split's training rows: "
                     f"{'--validation' if args.validation else '--epochs'} does not apply.")
    for flag, value in (("--budget-steps", args.budget_steps),
                        ("--budget-minutes", args.budget_minutes)):
        if args.model != "auto" and value is not None:
            parser.error(f"{flag}: only --model auto searches within a budget; "
                         f"{args.model!r} does not.")
    try:
        data = load_dataset(args.dataset)
    except ValueError as error:
        parser.error(f"--dataset: {error}")
    if args.model == "best" and canonical_name(data.name) not in BEST_MODEL:
        parser.error(f"--model best: no model chosen for dataset {data.name!r}; "
                     f"chosen for {sorted(BEST_MODEL)}.")
    if args.splits is not None and args.splits > len(data.splits):
        parser.error(f"--splits {args.splits}: {data.path} has only {len(data.splits)} splits.")

    def work():
        result = run(data, args.model, splits=args.splits, epochs=args.epochs, seed=args.seed,
                     num_samples=args.samples, validation=args.validation,
                     budget_steps=args.budget_steps,
                     budget_minutes=args.budget_minutes)
        print(f"\n{result['num_splits']} splits in {result['seconds']:.0f}s\n")
        print(format_table(result))
        return result, json.dumps(result, indent=1)

    return report.write(parser, args.out, work)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])  # a finished run exits 0; parser errors exit 2

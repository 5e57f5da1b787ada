"""The covariate-shift report: per-intensity summaries, means over seeds, Markdown tables.

`zoo.experiments.covariate_shift` scores every model on the clean and corrupted test sets
(one row per model and test set); these functions turn those rows into the tables of
BENCHMARKS.md: the mean over the corruptions at each intensity (`summarize`), the mean ±
standard error over seeds (`aggregate_seeds`), and NLL, accuracy and ECE tables with an
optional timing table (`format_table`).

Example:
Rows as `evaluate_under_shift` returns them (one model, the clean set and two
corruptions at intensity 3):

>>> rows = [{"model": "cnn", "corruption": name, "intensity": level, "accuracy": accuracy,
...          "nll": nll, "ece": 0.05, "num_samples": 1}
...         for name, level, accuracy, nll in [("clean", 0, 0.9, 0.3), ("rotation", 3, 0.7, 0.9),
...                                            ("contrast", 3, 0.8, 0.7)]]
>>> summary = summarize(rows)
>>> [(entry["intensity"], round(entry["nll"], 2)) for entry in summary]
[(0, 0.3), (3, 0.8)]
>>> print(format_table(summary).splitlines()[0])
NLL (nats, lower is better), by shift intensity (mean over the corruptions):
"""

import numpy as np

METRICS = ("accuracy", "nll", "ece")
CLEAN = "clean"


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


def format_table(summary: list, train_seconds: dict | None = None,
                 stage2_seconds: dict | None = None) -> str:
    """Markdown tables, models x intensities, of NLL, accuracy and ECE.

    Column "clean" is intensity 0; columns 1-5 are means over the
    corruptions; "mean 1-5" is the mean over the shifted columns. With
    `train_seconds` (dict model -> seconds) a last table gives the training
    wall time and the Monte Carlo samples of each model.

    Args:
        summary: the list `summarize` returns.
        train_seconds: optional dict model name -> training seconds.
        stage2_seconds: optional dict model name -> the seconds of a two-stage
            model's second stage (included in its train seconds); a column
            of the timing table.

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
        columns = [train_seconds] + ([stage2_seconds] if stage2_seconds else [])
        lines += ["| model | MC samples T | train s |"
                  + (" of which stage 2 s |" if stage2_seconds else ""),
                  "|---|---:|" + "---:|" * len(columns)]
        for model in models:
            cells = [str(samples.get(model))] + [
                "–" if column.get(model) is None else f"{column[model]:.1f}"
                for column in columns]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"

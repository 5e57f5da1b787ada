"""Tests of the UCI benchmark protocol (`zoo.experiments.uci_benchmark`)."""

import json
import math
import pathlib
import runpy
import sys
import warnings

import numpy as np
import pytest

from zoo.experiments import uci_benchmark as ub
from zoo.models.registry import list_models
from zoo.run.candidates import Candidate

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SHARED_UCI = REPO_ROOT.parent / "shared" / "data" / "uci"
FIVE = ("concrete", "energy", "kin8nm", "wine-quality-red", "yacht")
METHODS = ("VI", "PBP", "MC Dropout", "Deep Ensembles", "DVI")


def _write_layout(directory, rows=36, splits=2, n_splits_file=None, seed=0):
    """A small dataset in the UCI layout: 3 features, target in column 1.

    The target sits between feature columns so that a loader ignoring
    index_target.txt would be caught.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    y = 10.0 + 3.0 * x[:, 0] - 2.0 * x[:, 2] + rng.normal(scale=0.5, size=rows)
    table = np.column_stack([x[:, 0], y, x[:, 1], x[:, 2]])
    directory.mkdir(parents=True, exist_ok=True)
    np.savetxt(directory / "data.txt", table)
    (directory / "index_features.txt").write_text("0\n2\n3\n")
    (directory / "index_target.txt").write_text("1\n")
    for k in range(splits):
        order = np.random.default_rng(100 + k).permutation(rows)
        test, train = order[: rows // 6], order[rows // 6:]
        np.savetxt(directory / f"index_train_{k}.txt", train, fmt="%d")
        np.savetxt(directory / f"index_test_{k}.txt", test, fmt="%d")
    if n_splits_file is not None:
        (directory / "n_splits.txt").write_text(f"{n_splits_file}\n")
    return directory


def test_standard_error_is_std_over_root_n():
    assert ub.standard_error([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(1.25) / 2)
    assert ub.standard_error([-3.1]) == 0.0
    with pytest.raises(ValueError, match="values"):
        ub.standard_error([])


def test_canonical_names_and_default_settings():
    assert ub.canonical_name("wine") == "wine-quality-red"
    assert ub.canonical_name("bostonHousing") == "boston"
    settings = ub.settings_for("no-such-dataset", "mc_dropout_mlp")
    assert settings["epochs"] == ub.DEFAULT_SETTINGS["epochs"]
    assert settings["rate"] == 0.05


def test_chosen_settings_name_registered_models():
    # The registry's regression models for tables (not flipout_lenet, an image model).
    assert ub.REGRESSION_MODELS == (
        "bayesian_transformer", "bbb_mlp", "bbb_mlp_heteroscedastic", "deep_ensemble",
        "dvi_mlp", "flipout_mlp", "flipout_mlp_heteroscedastic", "mc_dropout_mlp",
        "mc_dropout_mlp_heteroscedastic", "node_bnn")
    assert set(ub.REGRESSION_MODELS) <= set(list_models())
    assert set(ub.BEST_MODEL) == set(FIVE)
    for (name, model), settings in ub.SETTINGS.items():
        assert model in ub.REGRESSION_MODELS, (name, model)
        assert settings["epochs"] > 0 and settings["batch_size"] > 0
    for name, model in ub.BEST_MODEL.items():
        assert (name, model) in ub.SETTINGS, name


def test_default_number_of_splits(tmp_path):
    data = ub.load_dataset(_write_layout(tmp_path / "a", splits=3))
    assert ub.default_num_splits(data) == 3
    data = ub.load_dataset(_write_layout(tmp_path / "b", splits=3, n_splits_file=2))
    assert ub.default_num_splits(data) == 2


def test_validation_split_holds_out_the_end_of_the_training_rows(tmp_path):
    data = ub.load_dataset(_write_layout(tmp_path / "tiny", rows=60))
    train, test = data.splits[1]
    part = ub.validation_split(data, 1, fraction=0.2)
    held_out = train[len(train) - len(part["y_test_raw"]):]
    assert len(part["y_test_raw"]) == round(0.2 * len(train))
    np.testing.assert_array_equal(part["y_test_raw"], data.y[held_out])
    assert not set(held_out) & set(test)
    # Standardised with the fit part only: it has mean 0, the held-out part not exactly.
    assert abs(float(np.mean(part["y_train"]))) < 1e-6
    assert part["y_scaler"].mean == pytest.approx(np.mean(data.y[train[:len(part["y_train"])]]))
    with pytest.raises(ValueError, match="fraction"):
        ub.validation_split(data, 0, fraction=1.0)


def test_run_on_validation_defaults_to_two_splits(tmp_path, capsys):
    directory = _write_layout(tmp_path / "tiny", splits=3)
    result = ub.run(directory, "mc_dropout_mlp", epochs=1, num_samples=3,
                    overrides={"hidden_units": (8,)}, validation=True)
    assert result["validation"] and result["num_splits"] == 2
    assert result["settings"]["hidden_units"] == (8,)
    assert "validation  2/2" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["mc_dropout_mlp_heteroscedastic", "flipout_mlp"])
def test_run_on_a_tiny_layout(tmp_path, model, capsys):
    directory = _write_layout(tmp_path / "tiny")
    result = ub.run(directory, model, epochs=2, num_samples=4, seed=1)
    assert [row["split"] for row in result["rows"]] == [0, 1]
    lls = [row["ll"] for row in result["rows"]]
    rmses = [row["rmse"] for row in result["rows"]]
    assert all(math.isfinite(v) for v in lls + rmses)
    # Scored in the target's units: two epochs leave the RMSE near the
    # target's spread (std ~3.6), far from the standardised scale's ~1.
    assert all(1.5 < v < 20 for v in rmses)
    assert result["ll"]["mean"] == pytest.approx(np.mean(lls))
    assert result["ll"]["se"] == pytest.approx(ub.standard_error(lls))
    assert result["rmse"]["se"] == pytest.approx(ub.standard_error(rmses))
    assert result["num_splits"] == 2 and result["settings"]["epochs"] == 2
    assert result["seconds"] >= sum(row["seconds"] for row in result["rows"]) * 0.99
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 2 and "split  2/2" in printed[1]


def test_run_rejects_bad_arguments(tmp_path):
    directory = _write_layout(tmp_path / "tiny")
    with pytest.raises(ValueError, match="`model`"):
        ub.run(directory, "no_such_model", epochs=1)
    with pytest.raises(ValueError, match="`splits` is 3 but"):
        ub.run(directory, "mc_dropout_mlp", splits=3, epochs=1)
    with pytest.raises(ValueError, match="`epochs`"):
        ub.run(directory, "mc_dropout_mlp", epochs=0)
    with pytest.raises(ValueError, match="`num_samples`"):
        ub.run(directory, "mc_dropout_mlp", epochs=1, num_samples=-2)
    with pytest.raises(ValueError, match="`dataset`"):
        ub.run(tmp_path / "missing", "mc_dropout_mlp", epochs=1)
    with pytest.raises(ValueError, match="no best model"):
        ub.run(directory, "best", epochs=1)
    for kwargs in ({"epochs": 1}, {"validation": True}, {"overrides": {"rate": 0.1}}):
        with pytest.raises(ValueError, match="'auto' chooses its own settings"):
            ub.run(directory, "auto", **kwargs)
    with pytest.raises(ValueError, match="`budget_minutes`"):
        ub.run(directory, "auto", budget_minutes=-1.0)
    with pytest.raises(ValueError, match="`budget_steps` must be a positive int"):
        ub.run(directory, "auto", budget_steps=0)


def test_auto_chooses_per_split_on_its_training_rows(tmp_path, monkeypatch):
    tiny = (Candidate("tiny_dropout", "mc_dropout_mlp_heteroscedastic", {"hidden_units": (8,)},
                      batch_size=16, steps=30),
            Candidate("tiny_flipout", "flipout_mlp_heteroscedastic", {"hidden_units": (8,)},
                      batch_size=16, steps=30))
    monkeypatch.setattr(ub.auto_run, "CANDIDATES", tiny)
    directory = _write_layout(tmp_path / "tiny", rows=60)
    result = ub.run(directory, "auto", num_samples=10, verbose=False)
    assert result["model"] == "auto" and result["num_splits"] == 2
    assert [c["name"] for c in result["settings"]["candidates"]] == ["tiny_dropout",
                                                                      "tiny_flipout"]
    data = ub.load_dataset(directory)
    for k, row in enumerate(result["rows"]):
        selection = row["selection"]
        assert row["chosen"] == selection["candidate"]["name"]
        assert selection["seed"] == k  # split k searches with seed + k
        # The search saw split k's training rows only: 80% fit, 20% validation.
        assert selection["num_fit"] + selection["num_validation"] == len(data.splits[k][0])
        assert math.isfinite(row["ll"]) and row["rmse"] > 0
        # The refit left out half of the 10 validation rows and was checked on them.
        assert row["refit"]["guard_rows"] == 5 and row["refit"]["kept"] in ("refit",
                                                                             "search_model")
    assert result["settings"]["budget_steps"] is None  # every candidate's full run
    assert "ours: `auto` (2 splits)" in ub.format_table(result)


@pytest.mark.parametrize("argv, needle", [
    (["uci", "--model", "mc_dropout_mlp"], "--dataset"),
    (["uci", "--dataset", "{dir}", "--model", "nope"], "--model"),
    (["uci", "--dataset", "{dir}", "--model", "mc_dropout_mlp", "--splits", "5"], "--splits 5"),
    (["uci", "--dataset", "{dir}", "--model", "mc_dropout_mlp", "--epochs", "0"], "--epochs"),
    (["uci", "--dataset", "{dir}", "--model", "mc_dropout_mlp", "--samples", "x"], "--samples"),
    (["uci", "--dataset", "{dir}", "--model", "mc_dropout_mlp", "--seed", "-1"], "--seed"),
    (["uci", "--dataset", "{dir}/nowhere", "--model", "mc_dropout_mlp"], "--dataset"),
    (["uci", "--dataset", "{dir}", "--model", "best"], "--model best"),
    (["uci", "--dataset", "{dir}", "--model", "auto", "--epochs", "3"], "--epochs does not"),
    (["uci", "--dataset", "{dir}", "--model", "auto", "--validation"], "--validation does"),
    (["uci", "--dataset", "{dir}", "--model", "auto", "--budget-minutes", "0"],
     "--budget-minutes: must be a number of minutes above 0"),
    (["uci", "--dataset", "{dir}", "--model", "auto", "--budget-minutes", "inf"],
     "--budget-minutes"),
    (["uci", "--dataset", "{dir}", "--model", "auto", "--budget-steps", "-3"],
     "--budget-steps: must be a positive int, got -3"),
    (["tabular", "--dataset", "{dir}", "--model", "mc_dropout_mlp"], "suite"),
])
def test_main_errors_name_the_argument(tmp_path, capsys, argv, needle):
    directory = _write_layout(tmp_path / "tiny")
    argv = [arg.replace("{dir}", str(directory)) for arg in argv]
    with pytest.raises(SystemExit) as raised:
        ub.main(argv)
    assert raised.value.code == 2
    assert needle in capsys.readouterr().err


def _fake_result(dataset, model, lls, rmses):
    return {"dataset": dataset, "model": model, "num_splits": len(lls),
            "rmse": {"mean": float(np.mean(rmses)), "se": ub.standard_error(rmses)},
            "ll": {"mean": float(np.mean(lls)), "se": ub.standard_error(lls)}}


def test_format_table_lists_ours_and_the_published_methods():
    text = ub.format_table([_fake_result("yacht", "mc_dropout_mlp", [-0.5, -0.7], [0.8, 1.2]),
                            _fake_result("kin8nm", "flipout_mlp", [1.25, 1.27], [0.071, 0.073])])
    yacht, kin8nm = text.split("### ")[1:]
    assert yacht.startswith("yacht")
    assert "| ours: `mc_dropout_mlp` (2 splits) | 1.00 ± 0.14 | −0.60 ± 0.07 |" in yacht
    assert "| Deep Ensembles | 1.58 ± 0.48 | −1.18 ± 0.21 |" in yacht
    assert "| DVI | — | −0.47 ± 0.03 |" in yacht
    assert "| VI | 6.89 ± 0.67 | −3.43 ± 0.16 |" in yacht
    # kin8nm's small RMSE keeps three decimals for ours.
    assert "| ours: `flipout_mlp` (2 splits) | 0.072 ± 0.001 | 1.26 ± 0.01 |" in kin8nm
    assert all(f"| {method} |" in kin8nm for method in METHODS)
    with pytest.raises(ValueError, match="empty"):
        ub.format_table([])


@pytest.mark.slow
def test_main_end_to_end_on_the_standard_yacht_splits(tmp_path, capsys):
    yacht = SHARED_UCI / "yacht"
    if not (yacht / "data" / "index_train_0.txt").is_file():
        pytest.skip(f"the standard UCI splits are not at {yacht} (shared data absent)")
    out = tmp_path / "yacht.json"
    result = ub.main(["uci", "--dataset", str(yacht), "--model", "best", "--splits", "1",
                      "--epochs", "1", "--samples", "8", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["dataset"] == "yacht" and saved["model"] == ub.BEST_MODEL["yacht"]
    assert saved["num_splits"] == 1 and len(saved["rows"]) == 1
    assert math.isfinite(saved["ll"]["mean"]) and saved["ll"]["se"] == 0.0
    assert saved["rows"][0]["ll"] == pytest.approx(result["ll"]["mean"])
    printed = capsys.readouterr().out
    assert "yacht" in printed and "| Deep Ensembles |" in printed


def test_module_runs_as_a_script(capsys, monkeypatch):
    # `python -m zoo.experiments.uci_benchmark uci --help` as runpy runs it: the module's
    # code as __main__, in this process (a subprocess would spend its time importing
    # TensorFlow for a help text; `python -m zoo` commands start fresh in test_cli.py).
    monkeypatch.setattr(sys, "argv", ["uci_benchmark.py", "uci", "--help"])
    with warnings.catch_warnings():
        # runpy notes that the module was imported before it ran as __main__.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
        with pytest.raises(SystemExit) as stop:
            runpy.run_module("zoo.experiments.uci_benchmark", run_name="__main__")
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--dataset" in out and "--samples" in out


def test_cli_benchmark_exits_0_and_checks_out_before_training(tmp_path, capsys):
    """A finished benchmark exits 0; a taken --out fails at once and stays as it was."""
    from zoo import cli  # noqa: PLC0415

    directory = _write_layout(tmp_path / "tiny", splits=1)
    argv = ["benchmark", "uci", "--dataset", str(directory), "--model", "mc_dropout_mlp",
            "--epochs", "1", "--samples", "4"]
    def exit_code(args):
        try:
            return cli.main(args)
        except SystemExit as stop:  # argparse's errors, as from the command line
            return stop.code

    taken = tmp_path / "mine.json"
    taken.write_text("a user's file")
    assert exit_code(argv + ["--out", str(taken)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert taken.read_text() == "a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "tiny"]
    out = tmp_path / "result.json"
    assert exit_code(argv + ["--out", str(out)]) == 0
    assert json.loads(out.read_text())["num_splits"] == 1
    assert not (tmp_path / "result.json.partial").exists()
    assert exit_code(argv + ["--out", str(tmp_path / "no" / "such" / "dir.json")]) == 2

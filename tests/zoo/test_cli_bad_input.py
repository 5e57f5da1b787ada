"""The command line's bad-input matrix: one line on stderr, exit 2, nothing left behind.

Every case runs `zoo.cli.main` in-process (an exception escaping it would be
a traceback for the user and fails the test); a few run as real processes
to check the exit code and that stderr holds no traceback.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.zoo.cli_harness import run_cli
from tests.zoo.cli_harness import snapshot
from zoo import cli

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
YACHT = REPO_ROOT / "tfp_bnn" / "data" / "uci_sets" / "yacht"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _uci_dir(root, rows):
    """A UCI-layout directory (data.txt + feature/target indices) with `rows`."""
    directory = root / "table"
    _write(directory / "data.txt", "\n".join(rows) + "\n")
    _write(directory / "index_features.txt", "0\n1\n")
    _write(directory / "index_target.txt", "2\n")
    return directory


def _good_rows(count=40):
    return [f"{i * 0.1:.1f} {i % 7:.1f} {i * 0.3 + 1:.2f}" for i in range(count)]


# Each case: (id, function(tmp_path) -> argv, expected message fragment).
# A train case writes to tmp_path/"run" unless it names its own --out.
def _train(*extra, model="bbb_mlp", dataset="yacht"):
    return ["train", model, "--dataset", str(dataset), "--epochs", "1", "--quiet", *extra]


def _table_with(row, text):
    """A train case on a UCI-layout table whose `row` (0-based) is `text`."""
    def make(tmp):
        rows = _good_rows()
        rows[row] = text
        return _train(dataset=_uci_dir(tmp, rows))
    return make


def _empty_table(tmp):
    return _train(dataset=_uci_dir(tmp, []))


def _empty_csv(tmp):
    return _train(dataset=_write(tmp / "series.csv", ""), model="bayesian_transformer")


def _csv_with_nan(tmp):
    lines = ['"Month","Value"'] + [f'"2000-{i:02d}",{i}.0' for i in range(1, 13)] * 10
    lines[20] = '"2001-08",nan'
    return _train(dataset=_write(tmp / "series.csv", "\n".join(lines) + "\n"),
                  model="bayesian_transformer")


def _not_csv(tmp):
    return _train(dataset=_write(tmp / "table.xlsx", "binary"))


def _out_under_a_file(tmp):
    blocker = _write(tmp / "blocker", "a file, not a directory")
    return _train("--out", str(blocker / "run"))


def _out_is_a_file(tmp):
    return _train("--out", str(_write(tmp / "run", "a file")))


def _out_finished(tmp):
    _write(tmp / "run" / "results.json", "{}")
    return _train("--out", str(tmp / "run"))


def _out_foreign(tmp):
    _write(tmp / "run" / "thesis.tex", "precious")
    return _train("--out", str(tmp / "run"))


def _finished_run(tmp, damage):
    """A copy of a finished run (trained once per module), damaged by `damage`."""
    run = tmp / "copy"
    shutil.copytree(FINISHED["path"], run)
    damage(run)
    return ["evaluate", str(run)]


def _model_random_bytes(tmp):
    return _finished_run(tmp, lambda run: (run / "model.keras").write_bytes(os.urandom(512)))


def _model_truncated(tmp):
    def damage(run):
        data = (run / "model.keras").read_bytes()
        (run / "model.keras").write_bytes(data[: len(data) // 3])
    return _finished_run(tmp, damage)


def _model_empty(tmp):
    return _finished_run(tmp, lambda run: (run / "model.keras").write_bytes(b""))


def _config_corrupt(tmp):
    return _finished_run(tmp, lambda run: (run / "config.json").write_text("{\"model\": "))


def _config_incomplete(tmp):
    return _finished_run(tmp, lambda run: (run / "config.json").write_text("{}"))


def _results_missing(tmp):
    return _finished_run(tmp, lambda run: (run / "results.json").unlink())


CASES = [
    # names
    ("unknown_model", lambda t: _train(model="bayesian_gpt"), "Unknown model 'bayesian_gpt'"),
    ("unknown_dataset", lambda t: _train(dataset="mnist"), "Unknown dataset 'mnist'"),
    ("missing_dataset_path", lambda t: _train(dataset=t / "nowhere.csv"), "does not exist"),
    ("dataset_not_csv", _not_csv, "is not a .csv time series"),
    ("model_cannot_train_on_dataset", lambda t: _train(model="flipout_lenet"),
     "cannot train on 'yacht'"),
    ("classifier_only_data_for_regressor",
     lambda t: _train(model="bbb_mlp_heteroscedastic", dataset="digits"),
     "cannot train on 'digits'"),
    # data content
    ("nan_in_table", _table_with(7, "0.7 nan 3.1"), "line 8"),
    ("inf_in_table", _table_with(3, "0.3 1.0 inf"), "line 4"),
    ("ragged_table", _table_with(5, "0.5 1.0"), "line 6"),
    ("text_in_table", _table_with(2, "0.2 abc 1.6"), "line 3"),
    ("empty_table", _empty_table, "no data rows"),
    ("empty_csv", _empty_csv, "series.csv"),
    ("nan_in_csv", _csv_with_nan, "line 21"),
    ("split_out_of_range", lambda t: _train("--split", "99"), "split"),
    # numbers
    ("epochs_zero", lambda t: _train("--epochs", "0"), "--epochs: must be a positive int"),
    ("epochs_text", lambda t: _train("--epochs", "many"), "--epochs"),
    ("split_negative", lambda t: _train("--split", "-1"), "--split"),
    ("seed_negative", lambda t: _train("--seed", "-3"), "--seed"),
    ("batch_size_zero", lambda t: _train("--batch-size", "0"), "--batch-size"),
    ("samples_zero", lambda t: _train("--samples", "0"), "--samples"),
    ("threads_negative", lambda t: _train("--threads", "-2"), "--threads"),
    ("checkpoint_seconds_negative", lambda t: _train("--checkpoint-seconds", "-1"),
     "--checkpoint-seconds"),
    ("strategy_unknown", lambda t: _train("--strategy", "tpu"), "invalid choice: 'tpu'"),
    # model "auto" chooses epochs, batch size and builder arguments itself
    ("auto_with_epochs", lambda t: _train(model="auto"), "--epochs: model 'auto' chooses"),
    ("auto_with_set", lambda t: ["train", "auto", "--dataset", "yacht", "--set", "rate=0.1"],
     "--set: model 'auto' chooses its own settings"),
    ("auto_budget_zero", lambda t: ["train", "auto", "--dataset", "yacht",
                                    "--budget-minutes", "0"], "--budget-minutes"),
    ("auto_on_classification", lambda t: ["train", "auto", "--dataset", "digits"],
     "'auto' chooses among the zoo's regression models for tables"),
    # hyperparameters
    ("set_without_equals", lambda t: _train("--set", "oops"), "expected KEY=VALUE"),
    ("set_unknown_key", lambda t: _train("--set", "no_such_argument=3"), "no_such_argument"),
    ("learning_rate_negative", lambda t: _train("--set", "learning_rate=-1"),
     "learning_rate"),
    ("learning_rate_nan", lambda t: _train("--set", "learning_rate=NaN"), "learning_rate"),
    ("hidden_units_zero", lambda t: _train("--set", "hidden_units=[0]"), "hidden_units"),
    ("hidden_units_empty", lambda t: _train("--set", "hidden_units=[]"), "hidden_units"),
    ("dropout_rate_above_one",
     lambda t: _train("--set", "rate=1.5", model="mc_dropout_mlp"), "rate"),
    # output directory
    ("out_under_a_file", _out_under_a_file, "cannot be written"),
    ("out_is_a_file", _out_is_a_file, "is not a directory"),
    ("out_holds_a_finished_run", _out_finished, "already holds a finished run"),
    ("out_holds_other_files", _out_foreign, "not a zoo run directory"),
    # evaluate
    ("evaluate_missing_dir", lambda t: ["evaluate", str(t / "never")],
     "not a finished zoo run"),
    ("evaluate_model_random_bytes", _model_random_bytes, "model.keras"),
    ("evaluate_model_truncated", _model_truncated, "model.keras"),
    ("evaluate_model_empty", _model_empty, "model.keras"),
    ("evaluate_config_corrupt", _config_corrupt, "config.json is corrupted"),
    ("evaluate_config_incomplete", _config_incomplete, "not a zoo run configuration"),
    ("evaluate_results_missing", _results_missing, "missing ['results.json']"),
    ("evaluate_samples_zero", lambda t: ["evaluate", str(t), "--samples", "0"], "--samples"),
    # benchmark
    ("benchmark_missing_dataset",
     lambda t: ["benchmark", "uci", "--dataset", str(t / "none"), "--model", "bbb_mlp"],
     "--dataset"),
    ("benchmark_unknown_model",
     lambda t: ["benchmark", "uci", "--dataset", str(YACHT), "--model", "gpt"],
     "--model: 'gpt' is not a regression model of the zoo"),
    ("benchmark_too_many_splits",
     lambda t: ["benchmark", "uci", "--dataset", str(YACHT), "--model", "bbb_mlp",
                "--splits", "50"], "--splits 50"),
    # the main job
    ("main_job_bad_flag", lambda t: ["--epochs", "-5"], "--epochs"),
]

FINISHED = {}


@pytest.fixture(scope="module", autouse=True)
def finished_run(tmp_path_factory):
    """One finished run for the evaluate cases to copy and damage."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli.main(["train", "flipout_mlp", "--dataset", "yacht", "--epochs", "1",
                     "--samples", "5", "--set", "hidden_units=[8]", "--quiet",
                     "--out", str(out)]) == 0
    FINISHED["path"] = out
    yield out


@pytest.mark.parametrize("make, message", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(make, message, tmp_path, capsys):
    argv = make(tmp_path)
    if argv[0] == "train" and "--out" not in argv:
        argv = argv + ["--out", str(tmp_path / "run")]
    before = snapshot(tmp_path)
    code = run_cli(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    # argparse prints its usage before the error line; ours print one line.
    assert lines and "error:" in lines[-1], err
    assert message in lines[-1], err
    assert "Traceback" not in err
    if not lines[-1].startswith("usage") and not any(line.startswith("usage") for line in lines):
        assert len(lines) == 1, err
    assert snapshot(tmp_path) == before  # nothing written, nothing half-written


def test_there_are_at_least_forty_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("argv, message", [
    (["train", "nope", "--dataset", "yacht"], "Unknown model 'nope'"),
    (["evaluate", "RUN"], "model.keras"),
])
def test_a_real_process_prints_one_line_and_no_traceback(argv, message, tmp_path):
    if argv[0] == "evaluate":
        run = tmp_path / "copy"
        shutil.copytree(FINISHED["path"], run)
        (run / "model.keras").write_bytes(b"PK\x03\x04 broken")
        argv = ["evaluate", str(run)]
    else:
        argv = argv + ["--out", str(tmp_path / "run")]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "zoo", *argv], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("python -m zoo")]
    assert len(ours) == 1 and message in ours[0], result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_an_interrupted_command_exits_130_in_one_line(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_train", interrupted)
    assert cli.main(["train", "bbb_mlp", "--dataset", "yacht"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "run the same command again to resume" in err


def test_finished_run_still_evaluates(capsys):
    # The undamaged original, for contrast with the damaged copies above.
    assert cli.main(["evaluate", str(FINISHED["path"]), "--samples", "5"]) == 0
    assert json.loads((FINISHED["path"] / "results.json").read_text())["epochs"] == 1

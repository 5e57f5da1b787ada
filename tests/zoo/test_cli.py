"""Tests of `python -m zoo list | train | evaluate | benchmark` (zoo.cli)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

import zoo
from zoo import cli
from zoo.run import datasets

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _env():
    path = [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                               else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2")


def test_list_names_every_model_and_dataset(capsys):
    # In-process: `python -m zoo` itself (its exit code, its stdout on a pipe)
    # is run by test_piped_train_under_mirrored_strategy.
    assert cli.main(["list"]) == 0
    printed = capsys.readouterr().out
    for name in zoo.list_models() + list(datasets.BUILTIN):
        assert f"  {name} " in printed
    assert "Blundell et al. 2015" in printed


def test_train_then_evaluate_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["train", "flipout_mlp", "--dataset", "yacht", "--epochs", "2",
                     "--set", "hidden_units=[8]", "--samples", "10", "--quiet",
                     "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "test: rmse" in printed and f"wrote {out}" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["overrides"] == {"hidden_units": [8]}
    assert config["description"].startswith("yacht: 277 train / 31 test")
    assert cli.main(["evaluate", str(out), "--samples", "10"]) == 0
    printed = capsys.readouterr().out
    assert "stored: rmse" in printed and "now:    rmse" in printed


# Bad input from the command line: tests/zoo/test_cli_bad_input.py.


def test_benchmark_is_dispatched(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["benchmark", "uci", "--help"])
    assert exit_info.value.code == 0
    assert "--splits" in capsys.readouterr().out


def test_override_parsing():
    assert cli._override("hidden_units=[100, 50]") == ("hidden_units", (100, 50))
    assert cli._override("rate=0.1") == ("rate", 0.1)
    assert cli._override("posterior=gaussian") == ("posterior", "gaussian")


def test_piped_train_under_mirrored_strategy(tmp_path):
    # One `python -m zoo train` process does both checks (a TensorFlow start-up
    # each would cost more than the one-epoch run): a piped stdout gets plain
    # progress lines, and the mirrored strategy over its local devices (one CPU
    # here) writes the same run directory.
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "train", "flipout_mlp", "--dataset", "yacht",
         "--epochs", "1", "--samples", "5", "--strategy", "mirrored",
         "--out", str(tmp_path / "run")],
        cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    # stdout is a pipe: plain lines, not Keras' bar with its control characters.
    assert "epoch 1/1  loss" in result.stdout, result.stdout
    assert "\r" not in result.stdout and "\x08" not in result.stdout and "\x1b" not in result.stdout
    assert "strategy mirrored" in result.stdout, result.stdout
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["epochs"] == 1
    assert not (tmp_path / "run" / ".backup").exists()


def test_version_prints_the_package_version_and_exits_0(capsys):
    import tfp_bnn  # noqa: PLC0415 - the version the package itself reports

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"tfp-bnn {tfp_bnn.__version__}\n"


def test_version_answers_without_starting_tensorflow():
    code = ("import sys, zoo.cli\n"
            "try:\n    zoo.cli.main(['--version'])\n"
            "except SystemExit as e:\n    code = e.code\n"
            "print('tensorflow' in sys.modules, code)\n")
    result = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                            text=True, check=True)
    assert result.stdout.splitlines()[-1] == "False 0"

"""Tests of `python -m zoo` without a subcommand, the main job (its model: test_bbb.py)."""

import contextlib
import io
import math
import re

import pytest

from zoo import cli as zoo_cli
from zoo.experiments import main_job as cli

RMSE_RE = re.compile(r"test RMSE (\S+) MPa")
LL_RE = re.compile(r"test log-likelihood (\S+) nats")


def _scores(text):
    rmse = RMSE_RE.search(text)
    ll = LL_RE.search(text)
    assert rmse and ll, f"no scores in the output:\n{text}"
    return float(rmse.group(1)), float(ll.group(1))


@pytest.fixture(scope="module")
def default_run():
    """(exit code, stdout) of `python -m zoo` with its defaults, run once in-process.

    In-process: the job needs no fresh interpreter (it starts TensorFlow only
    when not already started), and a subprocess would add TensorFlow's import.
    """
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = zoo_cli.main([])
    return code, out.getvalue()


@pytest.mark.slow
def test_default_python_m_zoo_reaches_the_quality_bar(default_run):
    # The published concrete RMSEs are 7.19 (VI) and 5.23 (MC dropout).
    code, stdout = default_run
    assert code == 0, stdout[-3000:]
    rmse, ll = _scores(stdout)
    assert rmse <= 6.5, stdout
    assert math.isfinite(ll), stdout


@pytest.mark.slow
def test_default_run_reports_its_split_progress_and_wall_time(default_run):
    _, stdout = default_run
    assert "bbb_mlp on concrete: 927 train / 103 test, 600 epochs, batch 32, seed 0" in stdout
    assert "(100 MC samples, 103 test points)" in stdout
    # Every 100th epoch: six progress lines, the last one after epoch 600.
    progress = re.findall(r"^epoch +(\d+)/600", stdout, re.MULTILINE)
    assert progress == ["100", "200", "300", "400", "500", "600"], stdout
    assert "95% prediction interval covers" in stdout
    assert "wall time" in stdout


def test_cli_main_parses_its_flags_and_prints_finite_scores(capsys):
    # Flags other than the defaults reach the run: 1 epoch, seed 1, 5 samples.
    assert cli.main(["--epochs", "1", "--seed", "1", "--samples", "5"]) == 0
    out = capsys.readouterr().out
    assert "927 train / 103 test, 1 epochs, batch 32, seed 1" in out
    assert "(5 MC samples, 103 test points)" in out
    rmse, ll = _scores(out)
    assert math.isfinite(rmse) and rmse > 0
    assert math.isfinite(ll)


def test_cli_rejects_bad_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--epochs", "0"])
    assert "--epochs must be a positive int" in capsys.readouterr().err

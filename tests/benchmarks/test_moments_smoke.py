"""Smoke run of benchmarks/moments.py: it runs end to end and prints its results.

No timing is asserted (a shared CI machine's clock says nothing about
correctness), nor the log-likelihood target (a 1-epoch, T = 10 run says
nothing about it): the check is that every variant runs — Flipout training,
vectorised Monte Carlo, the loop of compiled calls, the moment model with
the same weights, full and diagonal block passes — and that the speed
ratio, the log-likelihood difference and the growth table are printed with
numbers.
"""

import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "moments.py"

NUMBERS = (
    r"moments \(diagonal\) vs T=\d+ MC: (\S+)x faster \(target >= 30x",
    r"moments \(diagonal\) vs loop of \d+ forward calls \[reference, not the target\]: "
    r"(\S+)x faster",
    r"LL difference moments - MC: (\S+) nats/point \(SE over test points (\S+);",
    r"full-mode time grows as J\^(\S+) ",
)


@pytest.mark.slow
def test_quick_run_prints_ratio_and_log_likelihood_difference():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for pattern in NUMBERS:
        match = re.search(pattern, out)
        assert match, f"missing {pattern!r} in output:\n{out}"
        for value in match.groups():
            assert math.isfinite(float(value)), match.group(0)
    speedup = float(re.search(NUMBERS[0], out).group(1))
    assert speedup > 0
    assert "| J | full ms | diagonal ms | full/diagonal | largest covariance MB" in out
    for seq_len in (4, 8):
        assert re.search(rf"^\| {seq_len} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", out,
                         re.MULTILINE), out
    assert "---- summary for BENCHMARKS.md ----" in out

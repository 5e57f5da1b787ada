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
import re

import pytest

NUMBERS = (
    r"moments \(diagonal\) vs T=\d+ MC: (\S+)x faster \(target >= 30x",
    r"moments \(diagonal\) vs loop of \d+ forward calls \[reference, not the target\]: "
    r"(\S+)x faster",
    r"LL difference moments - MC: (\S+) nats/point \(SE over test points (\S+);",
    r"full-mode time grows as J\^(\S+) ",
)


@pytest.mark.slow
def test_quick_run_prints_ratio_and_log_likelihood_difference(run_benchmark):
    out = run_benchmark("moments", "--quick")
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

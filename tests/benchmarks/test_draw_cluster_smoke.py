"""Smoke run of benchmarks/draw_cluster.py --quick: every width and setting trains and is timed.

No timing is asserted; the check is that each of the three threshold settings trains at
both widths and every ratio line carries a number.
"""

import pytest


@pytest.mark.slow
def test_quick_run_times_every_setting_at_every_width(run_benchmark):
    out = run_benchmark("draw_cluster", "--quick", ratios=(
        "ratio plain / cluster, k = 16", "ratio default / faster of the two, k = 16",
        "ratio plain / cluster, k = 128", "ratio default / faster of the two, k = 128"))
    rows = [f"k = {k}, {s}" for k in (16, 128) for s in ("cluster", "plain", "default")]
    assert [row for row in rows if row not in out] == []

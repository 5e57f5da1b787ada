"""Smoke run of benchmarks/ensemble.py --quick (M = 2): it runs end to end and prints its ratios.

No timing is asserted (a shared CI machine's clock says nothing about correctness): the check
is that the sequential member fits and both ensemble variants (stacked weights, members one by
one) build, train and are timed.
"""

import pytest


@pytest.mark.slow
def test_quick_run_times_every_variant(run_benchmark):
    out = run_benchmark("ensemble", "--quick", ratios=(
        "ratio ensemble stacked / sequential", "ratio ensemble one by one / sequential"))
    rows = ("2 sequential member fits", "one fit, M = 2, stacked weights",
            "one fit, M = 2, members one by one")
    assert [row for row in rows if row not in out] == []

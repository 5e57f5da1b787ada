"""Smoke run of benchmarks/auto_cost.py: the cost table of auto's search by data size.

No time is asserted; the steps are: they follow from `zoo.run.candidates` alone.
"""

import re

from zoo.run.candidates import CANDIDATES


def test_quick_run_prints_each_size_with_its_steps(run_benchmark):
    out = run_benchmark("auto_cost", "--quick")
    for rows in (200, 5_000):
        expected = sum(c.max_epochs(rows) * c.steps_per_epoch(rows) for c in CANDIDATES[:2])
        line = re.search(rf"^ +{rows:,} +(\d+) +(\d+) +([\d,]+) +(\d+\.\d) ", out, re.MULTILINE)
        assert line, out
        batch, epochs, steps, _ = line.groups()
        assert int(steps.replace(",", "")) == expected
        assert (int(batch), int(epochs)) == (CANDIDATES[0].batch_for(rows),
                                            CANDIDATES[0].max_epochs(rows))

"""Smoke run of benchmarks/predict.py: it runs end to end and prints its ratios.

No timing is asserted (a shared CI machine's clock says nothing about
correctness): the check is that every variant runs — the loop of predict
calls, tfp_bnn.predict, the exported SavedModel, the Dense floor — and that
each ratio line is there with a number.
"""

import pytest

RATIO_LINES = (
    "ratio loop of predict / tfp_bnn.predict.sample [latency]",
    "ratio loop of predict / exported serve [latency]",
    "ratio tfp_bnn.predict.sample / Dense floor [throughput]",
    "ratio tfp_bnn.predict.classification / Dense floor [throughput]",
)


@pytest.mark.slow
def test_quick_run_prints_every_ratio(run_benchmark):
    run_benchmark("predict", "--quick", ratios=RATIO_LINES)

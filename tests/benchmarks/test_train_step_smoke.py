"""Smoke run of benchmarks/train_step.py: it runs end to end and prints its ratios.

No timing is asserted: step times on a shared CI machine say nothing about
correctness. What is checked is that every variant builds, compiles (with
and without XLA) and trains, and that the ratio lines are there.
"""

import pytest

RATIO_LINES = (
    "ratio ours Flipout / keras Dense [jit off]",
    "ratio TFP Flipout / ours Flipout [jit off]",
    "ratio ours Flipout / keras Dense [XLA]",
    "ratio TFP Flipout / ours Flipout [XLA]",
)


@pytest.mark.slow
def test_quick_run_prints_every_ratio(run_benchmark):
    out = run_benchmark("train_step", "--quick", ratios=RATIO_LINES)
    for row in ("keras.layers.Dense [jit off]", "tfp_bnn DenseFlipout [XLA]",
                "tfp_bnn DenseReparameterization [jit off]",
                "tfp_bnn DenseLocalReparameterization [XLA]"):
        assert row in out, f"missing table row {row!r}"
    assert "tensorflow " in out and "cpu cores:" in out

"""Smoke run of benchmarks/train_step.py: it runs end to end and prints its ratios.

No timing is asserted: step times on a shared CI machine say nothing about
correctness. What is checked is that every variant of the quick run builds,
compiles (with and without XLA) and trains, and that the ratio lines are
there. The quick run has each of our layers in at least one table, DenseFlipout
in both (`QUICK_TABLES` of the script).
"""

import re

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
        # A median in ms, not "n/a (error)": the variant compiled and trained.
        assert re.search(rf"^  {re.escape(row)} +\d+\.\d+ ", out, re.MULTILINE), \
            f"missing or failed table row {row!r}:\n{out}"
    assert "tensorflow " in out and "cpu cores:" in out


@pytest.mark.slow
def test_quick_run_on_jax_prints_the_flipout_ratio(run_benchmark):
    # `--backend jax` from a TensorFlow process: the script re-runs itself with
    # KERAS_BACKEND=jax and relays the subprocess's output.
    out = run_benchmark("train_step", "--quick", "--backend", "jax", ratios=(
        "ratio ours Flipout / keras Dense [XLA]",
        "ratio hand-written Flipout without random numbers / Dense [plain JAX: the floor]"))
    assert "(re-running train_step.py with KERAS_BACKEND=jax)" in out
    assert "(backend jax)" in out and "skipped on JAX: tfp.layers.DenseFlipout" in out
    for row in ("keras.layers.Dense [XLA]", "tfp_bnn DenseFlipout [XLA]",
                "hand-written Dense", "hand-written Flipout, no random numbers"):
        assert re.search(rf"^  {re.escape(row)} +\d+\.\d+ ", out, re.MULTILINE), (row, out)

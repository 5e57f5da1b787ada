"""Smoke run of benchmarks/train_step.py: it runs end to end and prints its ratios.

No timing is asserted: step times on a shared CI machine say nothing about
correctness. What is checked is that every variant of the quick run builds,
compiles (with and without XLA) and trains, and that the ratio lines are
there. The quick run has each of our layers in at least one table, DenseFlipout
in both (`QUICK_TABLES` of the script).
"""

import math
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
def test_paired_quick_run_times_both_backends_and_prints_their_quotient(run_benchmark):
    # `--paired-runs 1`: the script runs itself once per backend in a
    # subprocess (KERAS_BACKEND set, output relayed) and divides JAX's
    # Flipout / Dense ratio by TensorFlow's.
    out = run_benchmark("train_step", "--quick", "--paired-runs", "1", ratios=(
        "ratio ours Flipout / keras Dense [jit off]",
        "ratio ours Flipout / keras Dense [XLA]",
        "ratio hand-written Flipout without random numbers / Dense [plain JAX: the floor]",
        "ratio JAX Flipout/Dense over TensorFlow's [median of 1 pairs]"))
    for backend in ("tensorflow", "jax"):
        assert f"(re-running train_step.py with KERAS_BACKEND={backend})" in out
    assert "(backend jax)" in out and "skipped on JAX: tfp.layers.DenseFlipout" in out
    for row in ("keras.layers.Dense [XLA]", "tfp_bnn DenseFlipout [XLA]",
                "hand-written Dense", "hand-written Flipout, no random numbers",
                "tfp_bnn DenseFlipout [jit off]"):
        assert re.search(rf"^  {re.escape(row)} +\d+\.\d+ ", out, re.MULTILINE), (row, out)
    pair = re.search(r"pair 1: TensorFlow (\S+), JAX (\S+), JAX / TensorFlow (\S+)", out)
    assert pair, out
    tf_ratio, jax_ratio, quotient = (float(v) for v in pair.groups())
    assert quotient == pytest.approx(jax_ratio / tf_ratio, abs=0.01)


def test_paired_summary_divides_each_pair_and_takes_the_median(benchmark_module):
    module = benchmark_module("train_step")
    report = module.paired_summary([{"tensorflow": 3.0, "jax": 3.3},
                                    {"tensorflow": 2.0, "jax": 2.4},
                                    {"tensorflow": 4.0, "jax": 4.0}])
    assert "JAX / TensorFlow 1.100" in report and "JAX / TensorFlow 1.200" in report
    assert "[median of 3 pairs]: 1.100   (range 1.000-1.200; target <= 1.1: PASS)" in report
    output = "x\nratio ours Flipout / keras Dense [jit off]: n/a\n"
    assert math.isnan(module.backend_ratio(output, "tensorflow"))
    with pytest.raises(RuntimeError, match="printed no line"):
        module.backend_ratio(output, "jax")

"""Smoke run of benchmarks/train_step.py: it runs end to end and prints its ratios.

No timing is asserted: step times on a shared CI machine say nothing about
correctness. What is checked is that every variant builds, compiles (with
and without XLA) and trains, and that the ratio lines are there.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_step.py"

RATIO_LINES = (
    "ratio ours Flipout / keras Dense [jit off]",
    "ratio TFP Flipout / ours Flipout [jit off]",
    "ratio ours Flipout / keras Dense [XLA]",
    "ratio TFP Flipout / ours Flipout [XLA]",
)


@pytest.mark.slow
def test_quick_run_prints_every_ratio():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for label in RATIO_LINES:
        match = re.search(re.escape(label) + r": (\S+)", out)
        assert match, f"missing {label!r} in output:\n{out}"
        # A ratio, not "n/a": the variant trained and was timed.
        assert float(match.group(1)) > 0, match.group(0)
    for row in ("keras.layers.Dense [jit off]", "tfp_bnn DenseFlipout [XLA]",
                "tfp_bnn DenseReparameterization [jit off]",
                "tfp_bnn DenseLocalReparameterization [XLA]"):
        assert row in out, f"missing table row {row!r}"
    assert "tensorflow " in out and "cpu cores:" in out

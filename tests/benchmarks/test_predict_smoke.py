"""Smoke run of benchmarks/predict.py: it runs end to end and prints its ratios.

No timing is asserted (a shared CI machine's clock says nothing about
correctness): the check is that every variant runs — the loop of predict
calls, tfp_bnn.predict, the exported SavedModel, the Dense floor — and that
each ratio line is there with a number.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "predict.py"

RATIO_LINES = (
    "ratio loop of predict / tfp_bnn.predict.sample [latency]",
    "ratio loop of predict / exported serve [latency]",
    "ratio tfp_bnn.predict.sample / Dense floor [throughput]",
    "ratio tfp_bnn.predict.classification / Dense floor [throughput]",
)


@pytest.mark.slow
def test_quick_run_prints_every_ratio():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for label in RATIO_LINES:
        match = re.search(re.escape(label) + r": (\S+)", result.stdout)
        assert match, f"missing {label!r} in output:\n{result.stdout}"
        assert float(match.group(1)) > 0, match.group(0)

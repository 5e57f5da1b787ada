"""Smoke run of benchmarks/predict.py: it runs end to end and prints its ratios.

No timing is asserted (a shared CI machine's clock says nothing about
correctness): the check is that every variant runs — the loop of predict
calls, tfp_bnn.predict, the exported SavedModel, the Dense floor — and that
each ratio line is there with a number.
"""

import re

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


@pytest.mark.slow
def test_quick_run_on_jax_prints_the_throughput_ratios(run_benchmark):
    # `--backend jax` from a TensorFlow process: the script re-runs itself with
    # KERAS_BACKEND=jax and relays the subprocess's output.
    out = run_benchmark("predict", "--quick", "--backend", "jax")
    assert "(re-running predict.py with KERAS_BACKEND=jax)" in out
    assert "(backend jax)" in out and "skipped on JAX: the exported SavedModel" in out
    assert re.search(r"^  keras Dense forward x 5 \(jax\.jit\) +\d+\.\d+ ", out,
                     re.MULTILINE), out
    if re.search(r"^  tfp_bnn\.predict\.sample\(model, x, 5\) +n/a", out, re.MULTILINE):
        pytest.skip("a tfp_bnn.layers.DenseFlipout model does not predict on Keras' JAX "
                    "backend yet (tfp_bnn.predict.sample fails)")
    for label in ("ratio tfp_bnn.predict.sample / Dense floor [throughput]",
                  "ratio tfp_bnn.predict.classification / Dense floor [throughput]"):
        match = re.search(re.escape(label) + r": (\S+)", out)
        assert match and float(match.group(1)) > 0, out

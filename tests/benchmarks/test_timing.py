"""benchmarks/_timing.py: how a variant that fails is reported."""

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.jax

_SPEC = importlib.util.spec_from_file_location(
    "_benchmark_timing", pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "_timing.py")
_timing = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_timing)


def _failing(error):
    def fit_steps(steps):
        raise error
    return _timing.Variant("failing", fit_steps)


@pytest.mark.parametrize("message, expected", [
    ("shapes differ\nmore detail", "shapes differ"),
    # TensorFlow's traced-function errors open with a line that only introduces the trace.
    ("in user code:\n\n    File x.py, line 3\n\n    Cannot convert a symbolic tf.Tensor\n",
     "Cannot convert a symbolic tf.Tensor"),
    ("", ""),
])
def test_a_failing_variant_reports_the_line_that_says_why(message, expected):
    variant = _failing(NotImplementedError(message))
    variant.warm_up(1)
    assert not variant.ok
    assert variant.error == f"NotImplementedError: {expected}"

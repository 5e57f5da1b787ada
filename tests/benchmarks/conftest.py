"""`run_benchmark(name, *argv, ratios=())`: a script of benchmarks/ run in-process, its stdout;
`benchmark_module(name)`: the script imported, for its functions.

The scripts' `main(argv)` is what `python benchmarks/NAME.py ARGV` runs; in
this process it skips a TensorFlow start-up per script.
"""

import importlib.util
import pathlib
import re

import pytest
import tensorflow as tf

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def benchmark_module(monkeypatch):
    # As `python benchmarks/NAME.py` would: the script's own folder first on
    # sys.path, for its private modules (`_common` then puts the repository there).
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name):
        spec = importlib.util.spec_from_file_location(f"_benchmark_{name}",
                                                      BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def run_benchmark(capsys, benchmark_module):
    # The scripts quiet TensorFlow's logger (level ERROR) for their process;
    # here that process is a test worker, whose later tests read warnings.
    logger = tf.get_logger()
    level = logger.level

    def run(name, *argv, ratios=()):
        """Also checks that each line of `ratios` is printed with a positive number."""
        module = benchmark_module(name)
        assert module.main(list(argv)) == 0
        out = capsys.readouterr().out
        for label in ratios:
            match = re.search(re.escape(label) + r": (\S+)", out)
            assert match, f"missing {label!r} in output:\n{out}"
            # A ratio, not "n/a": the variant ran and was timed.
            assert float(match.group(1)) > 0, match.group(0)
        return out

    yield run
    logger.setLevel(level)  # setLevel, not the attribute: it clears the logger's cache

"""Every other Example section of tfp_bnn and zoo runs (see test_docstrings.py).

The examples of module docstrings, of private functions and classes, and of
zoo's experiments and run machinery: what `test_docstrings.py` does for the
public names, with the same globals, sandbox and doctest options
(`tests/integration/docstring_collector.py`). A separate file so that the two
halves, about 40 s together on 2 shared cores, run on both test workers.
"""

import pytest

from tests.integration.docstring_collector import OTHER_EXAMPLES
from tests.integration.docstring_collector import run_example
from tests.integration.docstring_collector import sandbox  # noqa: F401 (a fixture)


@pytest.mark.parametrize("name", OTHER_EXAMPLES)
def test_example(name, sandbox):  # noqa: F811 (the fixture)
    run_example(name)

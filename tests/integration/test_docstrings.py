"""Every public name of tfp_bnn and zoo is documented, and its example runs.

Public names: the functions and classes in `tfp_bnn.__all__`, `zoo.__all__`,
and in the `__all__` of each public subpackage that `tfp_bnn.__all__` names
(and of the submodules those list, e.g. `tfp_bnn.laplace.curvature`); a
module without `__all__` (`tfp_bnn.losses`, `export`, `saving`, ...) exports
the functions and classes it defines whose names do not start with `_`.
Constants (`zoo.MODELS`, `tfp_bnn.flows.FLOWS`, ...) carry no docstring of
their own and are not checked. `tfp_bnn.testing` is the test suite's helper,
not in `tfp_bnn.__all__`, and is not checked. Beside each class, its public
methods defined in the class body that have a docstring of their own are
checked too (Keras hooks such as `call` or `get_config` without one are
documented by the class; properties are attributes, not checked).

Sections (test_sections), one line per failure in one assertion message:
- a summary line;
- `Args:` documenting exactly the parameters of the signature (a class: its
  constructor's, `inspect.signature(cls)`), ignoring `self`/`cls`, `*args`
  and `**kwargs` unless documented, and an entry for a name that is no
  parameter fails. A subclass whose constructor forwards `**kwargs` to its
  parent documents them as one `**kwargs:` entry naming that parent (where
  they are documented), as Keras does; it need not repeat them;
- `Call arguments:` on every `keras.layers.Layer` whose `call` takes more
  than `inputs`, documenting exactly `call`'s parameters;
- `Returns:` (or `Yields:` for a generator) when the body returns a value;
- `Example:` on every class and function (optional on methods, whose class
  shows them in use; an example a method has runs like the others).

Examples (test_example, one test per object, named by it): each `Example:`
section of a public name is run with doctest (DocTestParser on the section's text, output
compared where the example shows it, NORMALIZE_WHITESPACE | ELLIPSIS); a
section without `>>>` lines fails. Globals, the same for every example: the
namespace of the object's own module, overlaid by the prelude

    import keras
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability as tfp
    import tfp_bnn

Examples run in a fresh temporary directory (the working directory and
`tempfile`'s default folder), with outgoing network connections refused,
and `keras.utils.set_random_seed` set by tests/conftest.py before each.

Every other Example section of tfp_bnn and zoo (module docstrings, private
functions, zoo's experiments and run machinery) runs the same way in
test_docstring_examples.py; the collector both use is
tests/integration/docstring_collector.py.
"""

import pytest

from tests.integration.docstring_collector import DOCUMENTED
from tests.integration.docstring_collector import PUBLIC_EXAMPLES
from tests.integration.docstring_collector import problems_of
from tests.integration.docstring_collector import run_example
from tests.integration.docstring_collector import sandbox  # noqa: F401 (a fixture)


def test_sections():
    problems = [line for name, (value, owner) in DOCUMENTED.items()
                for line in problems_of(name, value, owner)]
    assert not problems, f"{len(problems)} docstring problems:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", PUBLIC_EXAMPLES)
def test_example(name, sandbox):  # noqa: F811 (the fixture)
    run_example(name)

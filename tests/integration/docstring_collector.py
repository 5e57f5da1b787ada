"""The docstring collector of tests/integration/test_docstrings.py (the rules are there).

Which names are public, how a docstring's sections are read and checked, and
how an Example section runs; `test_docstrings.py` checks the public names and
runs their examples, `test_docstring_examples.py` runs every other Example
section of tfp_bnn and zoo (modules, private helpers, zoo's experiments).
"""


import ast
import doctest
import importlib
import inspect
import pkgutil
import re
import socket
import tempfile
import textwrap
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
import zoo

SECTIONS = ("Args", "Arguments", "Call arguments", "Returns", "Yields", "Raises", "Example",
            "Examples", "Attributes", "Note", "Notes", "References", "Warning")
_HEADER = re.compile(r"^(%s):\s*$" % "|".join(SECTIONS))
# `name: text` or griffe's `name (type): text`.
_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_][A-Za-z0-9_]*)(?: \([^)]*\))?:(\s|$)")
PRELUDE = {"keras": keras, "np": np, "tf": tf, "tfp": tfp, "tfp_bnn": tfp_bnn}


# -- which names are public ---------------------------------------------------------------
def _module_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, value in vars(module).items()
                 if not name.startswith("_") and _is_documentable(value)
                 and value.__module__ == module.__name__]
    return sorted(names)


def _is_documentable(value):
    return inspect.isfunction(value) or inspect.isclass(value)


def public_objects():
    """{qualified name: function or class}, each object once under its first name."""
    found, seen = {}, set()

    def add(name, value):
        if _is_documentable(value) and id(value) not in seen:
            seen.add(id(value))
            found[name] = value

    def walk(module):
        for name in _module_names(module):
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                walk(value)
            else:
                add(f"{module.__name__}.{name}", value)

    for name in tfp_bnn.__all__:
        value = getattr(tfp_bnn, name)
        if isinstance(value, types.ModuleType):
            walk(value)
        else:
            add(f"tfp_bnn.{name}", value)
    walk(zoo)
    return found


def _method_function(value):
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    return value if inspect.isfunction(value) else None


def documented_names():
    """{name: (object, owner class or None)}: public objects and their documented methods."""
    names = {}
    for name, value in public_objects().items():
        names[name] = (value, None)
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                function = _method_function(member)
                if not attribute.startswith("_") and function is not None and function.__doc__:
                    names[f"{name}.{attribute}"] = (function, value)
    return names


DOCUMENTED = documented_names()


# -- reading a docstring ------------------------------------------------------------------
def sections(docstring):
    """{section title: its lines}, "" for the text before the first section.

    The body of a section may be indented (Google style) or not (the
    `Example:` sections here); it ends at the next section title.
    """
    lines = inspect.cleandoc(docstring).splitlines()
    found, title = {"": []}, ""
    for line in lines:
        match = _HEADER.match(line)
        if match:
            title = match.group(1)
            found[title] = []
        else:
            found[title].append(line)
    return found


def entries(lines):
    """Names of the `name: text` entries of an Args-like section, and malformed lines."""
    body = [line for line in lines if line.strip()]
    if not body:
        return [], ["empty"]
    indent = min(len(line) - len(line.lstrip()) for line in body)
    names, bad = [], []
    for line in body:
        if len(line) - len(line.lstrip()) != indent:
            continue  # the continuation of an entry
        match = _ENTRY.match(line[indent:])
        if match:
            names.append(match.group(1))
        else:
            bad.append(line.strip()[:50])
    return names, bad


def _signature(value):
    try:
        return inspect.signature(value)
    except (TypeError, ValueError):
        return None


def _compare(names, signature, skip=("self", "cls")):
    """Problems of documented `names` against `signature`'s parameters."""
    named, variadic = [], {}
    for parameter in signature.parameters.values():
        if parameter.name in skip:
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            variadic["*" + parameter.name] = parameter.name
        elif parameter.kind is parameter.VAR_KEYWORD:
            variadic["**" + parameter.name] = parameter.name
        else:
            named.append(parameter.name)
    problems = [f"undocumented: {', '.join(p for p in named if p not in names)}"]
    extra = [n for n in names if n not in named and n not in variadic
             and n not in variadic.values()]
    problems.append(f"not a parameter: {', '.join(extra)}")
    return [problem for problem in problems if not problem.endswith(": ")]


def _returns_value(function):
    """(returns a value, is a generator), read from the function's own body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))
    except (OSError, TypeError):
        return False, False
    returns = generator = False
    stack = list(tree.body[0].body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            returns = True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            generator = True
        stack.extend(ast.iter_child_nodes(node))
    return returns, generator


def _is_layer_with_call_arguments(value):
    if not (inspect.isclass(value) and issubclass(value, keras.layers.Layer)):
        return None
    signature = _signature(value.call)
    names = [p for p in signature.parameters if p not in ("self", "inputs")]
    return signature if names else None


def problems_of(name, value, owner):
    """The section problems of one object, as 'name: problem' lines."""
    if not value.__doc__ or not inspect.cleandoc(value.__doc__).strip():
        return [f"{name}: no docstring"]
    found = sections(value.__doc__)
    problems = []
    summary = [line for line in found[""] if line.strip()]
    if not summary or not inspect.cleandoc(value.__doc__).splitlines()[0].strip():
        problems.append("no summary line")
    signature = _signature(value)
    skip = ("self", "cls") if owner is not None or inspect.isclass(value) else ()
    has_parameters = signature is not None and any(
        p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in skip
        for p in signature.parameters.values())
    args = found.get("Args", found.get("Arguments"))
    if args is None:
        if has_parameters:
            problems.append("no Args section")
    elif signature is not None:
        documented, bad = entries(args)
        problems += [f"Args: malformed entry '{line}'" for line in bad]
        problems += [f"Args: {p}" for p in _compare(documented, signature, skip)]
    call_signature = _is_layer_with_call_arguments(value)
    if call_signature is not None:
        if "Call arguments" not in found:
            problems.append("no Call arguments section")
        else:
            documented, bad = entries(found["Call arguments"])
            problems += [f"Call arguments: malformed entry '{line}'" for line in bad]
            problems += [f"Call arguments: {p}" for p in _compare(documented, call_signature)]
    if not inspect.isclass(value):
        returns, generator = _returns_value(value)
        if generator and "Yields" not in found and "Returns" not in found:
            problems.append("no Yields section")
        elif returns and not generator and "Returns" not in found:
            problems.append("no Returns section")
    if owner is None and not ({"Example", "Examples"} & set(found)):
        problems.append("no Example section")
    return [f"{name}: {problem}" for problem in problems]


# -- running the examples -----------------------------------------------------------------
def example_text(value):
    found = sections(value.__doc__ or "")
    text = found.get("Example", found.get("Examples"))
    return None if text is None else textwrap.dedent("\n".join(text))


def example_owners():
    """{name: (object, owner class or None)} of every docstring with an Example section.

    The public names, and beyond them every module of tfp_bnn and zoo (its
    own docstring, its functions and classes, their methods): an example
    anywhere in the packages runs. `__main__` modules are not imported.
    """
    owners = {name: pair for name, pair in DOCUMENTED.items()
              if example_text(pair[0]) is not None}
    seen = {id(value) for value, _ in DOCUMENTED.values()}
    for package in (tfp_bnn, zoo):
        modules = [package.__name__] + [
            info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
            if not info.name.endswith("__main__")]
        for module_name in modules:
            module = importlib.import_module(module_name)
            candidates = [(module_name, module, None)]
            for name, value in vars(module).items():
                if _is_documentable(value) and value.__module__ == module_name:
                    candidates.append((f"{module_name}.{name}", value, None))
                    if inspect.isclass(value):
                        candidates += [(f"{module_name}.{name}.{attribute}", function, value)
                                       for attribute, member in vars(value).items()
                                       for function in [_method_function(member)]
                                       if function is not None]
            for name, value, owner in candidates:
                if id(value) not in seen and example_text(value) is not None:
                    seen.add(id(value))
                    owners[name] = (value, owner)
    return owners


EXAMPLE_OWNERS = example_owners()
PUBLIC_EXAMPLES = sorted(name for name in EXAMPLE_OWNERS if name in DOCUMENTED)
# Examples of code that runs on Keras' JAX backend only: the JAX suite runs them
# (tests/predict/test__jax_runner.py), the TensorFlow suite leaves them out.
JAX_ONLY_MODULES = ("tfp_bnn.predict._jax_runner",)
OTHER_EXAMPLES = sorted(name for name in EXAMPLE_OWNERS if name not in DOCUMENTED
                        and not name.startswith(JAX_ONLY_MODULES))


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Temporary working directory and tempfile folder; no outgoing connections."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def refuse(self, address):
        raise OSError(f"docstring examples must not use the network (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    yield tmp_path


def run_example(name):
    """Runs the Example section of `name` (a key of EXAMPLE_OWNERS) with doctest."""
    value, owner = EXAMPLE_OWNERS[name]
    text = example_text(value)
    module = value if inspect.ismodule(value) else inspect.getmodule(
        owner if owner is not None else value)
    globs = dict(vars(module))
    globs.update(PRELUDE)
    test = doctest.DocTestParser().get_doctest(text, globs, name, module.__file__, 0)
    assert test.examples, f"{name}: the Example section has no '>>>' lines"
    runner = doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    output = []
    runner.run(test, out=output.append, clear_globs=True)
    assert runner.failures == 0, f"{name}: example failed\n" + "".join(output)

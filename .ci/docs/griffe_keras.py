"""Griffe extension for the API site: Keras-style docstrings and zoo's lazy names.

Griffe's Google parser reads Args / Returns / Raises as they are written here,
but two sections of this project's docstrings (Keras' style, not Google's)
need a translation, done on the docstring's text before it is parsed,
line for line, so a warning still points at the right line of the source:

- `Example:` with its `>>>` lines at the header's own indent (as in Keras).
  Griffe takes a section only when its body is indented, and knows
  `Examples:`, not `Example:`; the body is indented and the header becomes
  `Examples: Example:` (kind examples, title "Example:"), so the `>>>` lines
  render as Python code instead of nested block quotes.
- `Call arguments:` (what `layer(inputs, ...)` takes). Griffe has no such
  section; it becomes `Other parameters: Call arguments:`, a list of
  `name: description` entries titled "Call arguments:", whose names are not
  checked against the constructor's signature (they are `call`'s).
- `Args:` keeps its title (griffe would show "Parameters:").

`zoo` re-exports its names lazily through a module `__getattr__` (so that
`python -m zoo` reads its arguments before TensorFlow starts); statically
they are not members of `zoo`. For every name of a package's `__all__` that
is not a member, the one object of that name defined in the package's
modules becomes an alias member, so `zoo.build_model` is documented under
the name users call it by. No such object, or two, is a warning.

A named tuple class (`typing.NamedTuple`, or a subclass of
`collections.namedtuple(...)`) gets the `__init__` its fields make (griffe
does this for dataclasses only), so its Args match a signature.

`public_objects(package)` lists what the site documents; hooks.py builds a
page for each.
"""

import ast
import re

import griffe

_HEADER = re.compile(r"^(?P<indent> *)(?P<title>Args|Arguments|Example|Examples|Call arguments):\s*$")
# Any section header of the house style, to find where an Example section ends.
_ANY_HEADER = re.compile(
    r"^(?P<indent> *)(Args|Arguments|Call arguments|Returns|Yields|Raises|Example|Examples"
    r"|Attributes|Note|Notes|References|Warning|Warnings):\s*$")
_INDENT = "    "


def keras_sections(text):
    """The docstring `text` with the house style's sections in griffe's Google form.

    Same number of lines, so griffe's warnings keep their line numbers. A
    header followed by blank lines (`Example:`, blank, `>>> ...`, as Keras
    writes it) moves down onto the last blank line: griffe takes no section
    whose title is followed by a blank line.
    """
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        match = _HEADER.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, title = match.group("indent"), match.group("title")
        while i + 1 < len(lines) and not lines[i + 1].strip():
            out.append("")
            i += 1
        if title in ("Args", "Arguments"):
            out.append(f"{indent}{title}: {title}:")  # shown as written, not "Parameters:"
            i += 1
            continue
        if title == "Call arguments":
            out.append(f"{indent}Other parameters: Call arguments:")
            i += 1
            continue
        out.append(f"{indent}Examples: {title}:")
        body_end = i + 1
        while body_end < len(lines):
            header = _ANY_HEADER.match(lines[body_end])
            if header and len(header.group("indent")) <= len(indent):
                break
            body_end += 1
        body = lines[i + 1:body_end]
        written = [line for line in body if line.strip()]
        flush = written and min(len(line) - len(line.lstrip()) for line in written) <= len(indent)
        for line in body:
            out.append(_INDENT + line if flush and line.strip() else line)
        i = body_end
    return "\n".join(out)


def _public_names(module):
    """Sorted (name, object) of a module: its `__all__`, or the classes and functions it defines.

    A package that imports a function under the name of its own submodule
    (`from tfp_bnn.moments.relu import relu`) exports the function: the
    import runs after the submodule is set as an attribute, and replaces it.
    Griffe keeps the submodule under that name; the import says which object
    the name is.
    """
    if module.exports is None:
        return sorted((name, member) for name, member in module.members.items()
                      if not name.startswith("_") and not member.is_alias
                      and (member.is_class or member.is_function))
    names = []
    for name in sorted(module.exports):
        if name not in module.members:
            continue  # warned about by KerasDocstrings.on_package
        member = module[name]
        imported = module.imports.get(name)
        if member.is_module and imported and imported != member.path:
            member = module.modules_collection[imported]
        names.append((name, member))
    return names


def public_objects(package):
    """{module path: [(name, griffe object)]} for `package` and the modules it exports.

    The same reading as tests/integration/test_docstrings.py: a module's
    public names are its `__all__`, or without one the classes and functions
    it defines; an exported module is walked in turn.
    """
    found = {}

    def walk(module):
        names = []
        found[module.path] = names
        for name, member in _public_names(module):
            target = target_of(member)
            if target.is_module and target.path not in found:
                walk(target)
            names.append((name, member))

    walk(package)
    return found


def target_of(member):
    """The object an alias (an import) stands for; other objects themselves."""
    return member.final_target if member.is_alias else member


class KerasDocstrings(griffe.Extension):
    """Rewrites the house style's sections for griffe; resolves lazy `__all__` names."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = keras_sections(obj.docstring.value)

    def on_class(self, *, cls, **kwargs):
        """Gives a named tuple class the `__init__` Python makes from its fields.

        Griffe does so for dataclasses only; without it, the Args of a named
        tuple would be "not in the signature". Both kinds: `typing.NamedTuple`
        with annotated fields, and a subclass of `collections.namedtuple(name,
        fields)`.
        """
        if "__init__" in cls.members:
            return
        fields = []
        for base in cls.bases:
            path = getattr(base, "canonical_path", str(base))
            if path == "typing.NamedTuple":
                fields += [(member.name, member.annotation, member.value)
                           for member in cls.members.values()
                           if member.is_attribute and member.annotation is not None]
            elif path == "collections.namedtuple" and len(base.arguments) >= 2:
                names = ast.literal_eval(str(base.arguments[1]))
                names = names.replace(",", " ").split() if isinstance(names, str) else names
                fields += [(name, None, None) for name in names]
        if not fields:
            return
        parameters = [griffe.Parameter(name, annotation=annotation, default=default,
                                       kind=griffe.ParameterKind.positional_or_keyword)
                      for name, annotation, default in fields]
        init = griffe.Function("__init__", lineno=0, endlineno=0, parent=cls,
                               parameters=griffe.Parameters(griffe.Parameter("self"),
                                                            *parameters))
        cls.set_member("__init__", init)

    def on_package(self, *, pkg, **kwargs):
        if pkg.exports is None:
            return
        for name in pkg.exports:
            if name in pkg.members:
                continue
            defined = [obj for obj in _defined_in(pkg) if obj.name == name]
            if len(defined) != 1:
                griffe.logger.warning(
                    f"{pkg.path}.__all__ names {name!r}, which is "
                    f"{'defined nowhere' if not defined else 'defined more than once'} "
                    f"in {pkg.path}'s modules ({', '.join(o.path for o in defined)})")
                continue
            pkg.set_member(name, griffe.Alias(name, defined[0], parent=pkg))


def _defined_in(package):
    """Classes, functions and attributes defined (not imported) in `package`'s modules."""
    stack = [package]
    while stack:
        module = stack.pop()
        for member in module.members.values():
            if member.is_alias:
                continue
            if member.is_module:
                stack.append(member)
            elif module is not package:
                yield member

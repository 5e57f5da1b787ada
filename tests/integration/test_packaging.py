"""What a Python user expects of the package: licence, changelog, metadata, meaningful extras.

pyproject.toml holds the metadata (PEP 621) and setup.py the dependencies and
extras with their comments; both are read as text here (tomllib, ast), nothing
is built or installed.
"""

import ast
import hashlib
import pathlib
import re
import tomllib

import tfp_bnn

ROOT = pathlib.Path(__file__).resolve().parents[2]
# SHA-256 of the Apache License 2.0 as https://www.apache.org/licenses/LICENSE-2.0.txt
# has it (202 lines, the first blank), which LICENSE holds after its copyright line.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def setup_call():
    """The keywords of setup.py's setup(...) call, read without running it."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
    namespace = {}
    for node in tree.body:  # module-level constants such as DOCS, and lists built of them
        if isinstance(node, ast.Assign):
            try:
                value = eval(ast.unparse(node.value), {"__builtins__": {}}, dict(namespace))
            except (NameError, TypeError, ValueError):
                continue
            for target in node.targets:
                namespace[target.id] = value
    keywords = {}
    for keyword in call.keywords:
        source = ast.unparse(keyword.value)
        try:
            # Lists, strings and the module's constants (`[...] + DOCS`), nothing else.
            keywords[keyword.arg] = eval(source, {"__builtins__": {}}, dict(namespace))
        except NameError:
            keywords[keyword.arg] = source  # a call such as find_packages(...)
    return keywords


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_is_the_apache_2_text_with_a_copyright_line():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    first, _, body = text.partition("\n\n")
    assert re.fullmatch(r"Copyright \d{4} The tfp_bnn Authors", first)
    assert hashlib.sha256(body.encode()).hexdigest() == APACHE_2_SHA256
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]  # into the wheel and the sdist


def test_changelog_has_the_package_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert versions[0] == "Unreleased"
    assert versions[1] == tfp_bnn.__version__  # the newest release is this version
    assert re.search(rf"^## \[{re.escape(tfp_bnn.__version__)}\] - \d{{4}}-\d\d-\d\d$",
                     changelog, re.M)
    # The sdist carries it (the licence goes in through license-files).
    assert "include CHANGELOG.md" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").split("\n")


def test_pyproject_and_setup_py_agree_and_do_not_repeat_each_other():
    data = pyproject()
    project, setup = data["project"], setup_call()
    assert project["name"] == "tfp-bnn"
    assert data["build-system"]["build-backend"] == "setuptools.build_meta"
    # PEP 639 licence expressions are read from setuptools 77 on.
    floor = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", data["build-system"]["requires"][0])
    assert floor and int(floor.group(1)) >= 77
    # The version has one home, tfp_bnn.__version__, read without importing TensorFlow.
    assert "version" in project["dynamic"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tfp_bnn.__version__"}
    # What setup.py gives, pyproject.toml declares dynamic, and nothing twice.
    assert {"dependencies", "optional-dependencies"} <= set(project["dynamic"])
    assert "install_requires" in setup and "extras_require" in setup
    for field in ("name", "version", "license", "description", "long_description",
                  "python_requires", "classifiers"):
        assert field not in setup, f"setup.py repeats {field}= (pyproject.toml has it)"
    assert project["urls"]["Repository"] == setup["url"]
    assert project["readme"] == "README.md" and project["requires-python"] == ">=3.10"


def _names(requirements):
    return {re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0].lower()
            for requirement in requirements}


def test_every_extra_adds_something_or_is_a_documented_alias():
    setup = setup_call()
    required = _names(setup["install_requires"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    extras_table = readme[readme.index("### Extras"):]
    extras_table = extras_table[:extras_table.index("\n### ", 1)]
    for extra, requirements in setup["extras_require"].items():
        row = re.search(rf"^\| `{extra}` \|(.*)$", extras_table, re.M)
        assert row, f"README's Extras table has no row for {extra!r}"
        if not _names(requirements) - required:
            assert "alias" in row.group(1), f"{extra!r} adds nothing and is not called an alias"
    # Nothing tells users to install the alias.
    assert not re.search(r"pip install[^\n`]*\[plots\]", readme)


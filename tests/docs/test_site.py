"""The documentation site (.ci/docs/mkdocs.yml) builds with --strict and shows its content.

One `mkdocs build --strict` in a subprocess, shared by the tests (about 10 s
of CPU; this is the time the site adds to CI). The expectations are read from
the repository, not written here: the public names from the packages'
`__all__` (as tests/integration/test_docstrings.py reads them), the commands
and the migration tables from README.md, the stored outputs from colab/.
"""

import html
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

import tfp_bnn
import zoo

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".ci" / "docs" / "mkdocs.yml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's banner about its future
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    return result, site


@pytest.fixture(scope="module")
def site(build):
    """The built site. A strict build that ends in warnings still writes every page,
    so the tests below check the content whatever test_builds_strict says."""
    result, site = build
    if not (site / "index.html").is_file():
        pytest.fail("the site was not built:\n" + _warnings(result) + result.stderr[-2000:])
    return site


def _warnings(result):
    return "".join(line + "\n" for line in (result.stdout + result.stderr).splitlines()
                   if line.startswith(("WARNING", "ERROR")))


def page(site, path):
    """The HTML of the page at `path` (a URL path such as "api/tfp_bnn/")."""
    file = site / path / "index.html"
    assert file.is_file(), f"no page {path}"
    return file.read_text()


def text_of(markup):
    """The visible text of `markup`, whitespace collapsed."""
    markup = re.sub(r"<(script|style)\b.*?</\1>", " ", markup, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", markup)))


def readme_section(title):
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_builds_strict_without_warnings(build):
    result, _ = build
    assert result.returncode == 0 and not _warnings(result), (
        f"exit {result.returncode}\n{_warnings(result)}{result.stderr[-2000:]}")


# -- the API reference ---------------------------------------------------------------------
def public_names():
    """{id(object): (object, [its public paths])} for every public class, function, constant."""
    found = {}

    def walk(module):
        names = getattr(module, "__all__", None)
        if names is None:
            names = [name for name, value in vars(module).items()
                     if not name.startswith("_") and getattr(value, "__module__", None)
                     == module.__name__ and isinstance(value, (type, types.FunctionType))]
        for name in sorted(names):
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                walk(value)
            else:
                found.setdefault(id(value), (value, []))[1].append(f"{module.__name__}.{name}")

    for name in tfp_bnn.__all__:
        value = getattr(tfp_bnn, name)
        if isinstance(value, types.ModuleType):
            walk(value)
        else:
            found.setdefault(id(value), (value, []))[1].append(f"tfp_bnn.{name}")
    walk(zoo)
    return found


def anchors(site):
    """Every id="..." of the site's pages."""
    ids = set()
    for file in site.rglob("*.html"):
        ids.update(re.findall(r'\bid="([^"]+)"', file.read_text()))
    return ids


def test_every_public_name_is_documented(site):
    ids = anchors(site)
    missing = []
    for value, paths in public_names().values():
        # Under one of its public names, or where it is defined (a function that a
        # package imports over its own submodule: tfp_bnn.moments.relu.relu).
        defined = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if not ({*paths, defined} & ids):
            missing.append(" / ".join(paths))
    assert len(public_names()) > 150  # the walk found the packages' names
    assert not missing, f"{len(missing)} public names without documentation:\n" + \
        "\n".join(sorted(missing))


def test_layer_page_has_args_call_arguments_and_example(site):
    markup = page(site, "api/tfp_bnn/layers/DenseFlipout")
    assert 'id="tfp_bnn.layers.DenseFlipout"' in markup
    titles = re.findall(r'class="doc-section-title">([^<]+)<', markup)
    assert {"Args:", "Call arguments:", "Returns:", "Example:"} <= set(titles), titles
    text = text_of(markup)
    assert "units – positive int" in text  # an Args entry, name and description
    assert "DenseFlipout(16" in text.replace(" ", "")  # the example's code


def test_cli_page_has_every_command_help(site):
    from zoo import cli  # noqa: PLC0415 - reads no TensorFlow

    markup = page(site, "api/zoo/cli")
    missing = [command for command in cli.COMMANDS
               if f'id="python-m-zoo-{command}"' not in markup]
    assert not missing, missing
    text = text_of(markup)
    assert "usage: python -m zoo [-h]" in text and "usage: python -m zoo train" in text
    assert "--budget-minutes" in text  # an option of `train`


# -- pages from README.md and BENCHMARKS.md -------------------------------------------------
def test_getting_started_has_the_readme_commands(site):
    commands = re.findall(r"^pip install .*$", readme_section("Install and run"), re.M)
    assert len(commands) >= 2, commands  # from GitHub, then the clone's main job and tests
    text = text_of(page(site, "getting-started"))
    for command in commands:
        assert command in text


def test_home_and_getting_started_show_the_python_example(site):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"^```python\n(.*?)^```", readme, re.S | re.M).group(1)
    lines = [line.split("#")[0].strip() for line in example.splitlines()]
    for path in ("", "getting-started"):
        markup = page(site, path)
        assert '<span class="kn">import</span>' in markup, path  # Python, highlighted
        text = text_of(markup)
        missing = [line for line in lines if line and line not in text]
        assert not missing, (path, missing)


def test_migration_page_has_the_tables(site):
    section = readme_section("From tfp.layers to tfp_bnn")
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    first_cells = [row.split("|")[1].strip().replace("`", "").replace("\\*", "*")
                   for row in rows]
    markup = page(site, "migration")
    assert markup.count("<table>") == section.count("\n|---")
    cells = [text_of(cell).strip() for cell in re.findall(r"<t[dh]>(.*?)</t[dh]>", markup, re.S)]
    missing = [cell for cell in first_cells if cell not in cells]
    assert not missing, missing


def test_benchmarks_page_has_every_section(site):
    headings = re.findall(r"^##+ (.+)$", (ROOT / "BENCHMARKS.md").read_text(), re.M)
    text = text_of(page(site, "benchmarks"))
    missing = [h for h in headings if text_of(h.replace("`", "")) not in text]
    assert headings and not missing, missing


# -- tutorials -----------------------------------------------------------------------------
def stored_outputs(notebook):
    """(PNG images, first text lines) stored in a notebook's outputs."""
    images, lines = [], []
    for cell in json.loads(notebook.read_text())["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                images.append("".join(data["image/png"]).strip()[:200])
            # Text as the page shows it: a stream, or text/plain with nothing richer
            # beside it (nbconvert renders the richest representation).
            text = output.get("text") or (data.get("text/plain") if set(data) <= {"text/plain"}
                                          else None) or []
            text = [line.strip() for line in "".join(text).splitlines() if line.strip()]
            if text:
                lines.append(text[0])
    return images, lines


@pytest.mark.parametrize("notebook", sorted((ROOT / "colab").glob("*.ipynb")),
                         ids=lambda path: path.stem)
def test_tutorial_page_shows_stored_outputs(site, notebook):
    markup = page(site, f"colab/{notebook.stem}")
    images, lines = stored_outputs(notebook)
    # Until a notebook is stored with its outputs there is nothing more to check.
    for image in images:
        assert f'src="data:image/png;base64,{image}' in markup.replace("\n", "")
    text = text_of(markup)
    missing = [line for line in lines if re.sub(r"\s+", " ", line) not in text]
    assert not missing, missing


def test_no_page_loads_code_from_another_host(site):
    remote = re.compile(r'<script\b[^>]*\bsrc="(?:https?:)?//|import\("https?://'
                        r'|<link\b[^>]*rel="stylesheet"[^>]*href="(?:https?:)?//')
    offending = [str(file.relative_to(site)) for file in site.rglob("*.html")
                 if remote.search(file.read_text())]
    assert not offending, offending

"""The documentation site (.ci/docs/mkdocs.yml) builds with --strict and shows its content.

One `mkdocs build --strict` in a subprocess, shared by the tests (about 15 s
of CPU; this is the time the site adds to CI; the checks on the built pages
take about 3 s more). The expectations are read from
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


def api_pages(site):
    """{public name: HTML} of every page of one class or function (not a module's page)."""
    pages = {}
    for file in (site / "api").rglob("index.html"):
        markup = file.read_text()
        if "doc-object doc-module" not in markup and file.parent not in (
                site / "api", site / "api" / "zoo" / "cli"):
            name = ".".join(file.parent.relative_to(site / "api").parts)
            pages[name] = markup
    return pages


def test_api_pages_are_titled_by_their_public_name(site):
    pages = api_pages(site)
    assert "tfp_bnn.predict.regression" in pages and len(pages) > 150
    wrong = {}
    for name, markup in pages.items():
        headings = re.findall(r"<h1\b.*?</h1>", markup, re.S)
        # Its text, less the links (source, permalink) and labels ("dataclass").
        shown = [text_of(re.sub(r"<a\b.*?</a>|<small\b.*?</small>", "", h)).strip()
                 for h in headings]
        if shown != [name]:
            wrong[name] = shown
    assert not wrong, wrong
    titles = {}
    for file in site.rglob("*.html"):
        title = re.search(r"<title>(.*?)</title>", file.read_text(), re.S)
        if title and file.name != "404.html":
            titles.setdefault(html.unescape(title.group(1)), []).append(
                str(file.relative_to(site)))
    doubled = {title: files for title, files in titles.items() if len(files) > 1}
    assert not doubled, doubled


def test_signatures_are_formatted_to_the_line_length(site):
    width = int(re.search(r"^ +line_length: (\d+)$", CONFIG.read_text(), re.M).group(1))
    signatures = [html.unescape(re.sub(r"<[^>]+>", "", signature)).strip().split("\n")
                  for markup in api_pages(site).values()
                  for signature in re.findall(r'<div class="doc-signature highlight">(.*?)</div>',
                                              markup, re.S)]
    assert len(signatures) > 150
    # Black breaks a signature longer than the width into one argument a line.
    assert sum(len(lines) > 1 for lines in signatures) > 20
    too_long = [line for lines in signatures for line in lines if len(line) > width]
    assert not too_long, too_long


def test_classes_show_their_bases(site):
    markup = page(site, "api/tfp_bnn/layers/DenseFlipout")
    bases = re.search(r'<p class="doc doc-class-bases">(.*?)</p>', markup, re.S)
    assert bases and "BayesianDenseBase" in text_of(bases.group(1))


def test_objects_link_to_their_source_lines(site):
    """Each object's heading links to the file and lines of its definition on main."""
    repo = re.search(r'^\s*url="([^"]+)"', (ROOT / "setup.py").read_text(), re.M).group(1)
    links, wrong = 0, []
    for name, markup in api_pages(site).items():
        found = re.findall(r'class="doc-source-link" href="' + re.escape(repo)
                           + r'/blob/main/([^"#]+)#L(\d+)-L(\d+)"', markup)
        if not found:
            wrong.append(f"{name}: no source link")
        for path, first, last in found:
            links += 1
            lines = (ROOT / path).read_text().split("\n")[int(first) - 1:int(last)]
            # The lines hold the definition (after any decorators).
            if not any(re.match(r"\s*(class|def) \w+", line) or re.match(r"[A-Z_]+\b", line)
                       for line in lines):
                wrong.append(f"{name}: {path}#L{first}-L{last}")
    assert links > 200 and not wrong, wrong
    markup = page(site, "api/tfp_bnn/predict/regression")
    assert f'href="{repo}/blob/main/tfp_bnn/predict/regression.py#L' in markup


def test_code_names_link_to_their_pages(site):
    """A code span naming a public object links to that object's page; others stay plain."""
    pages = api_pages(site)
    linked, wrong = set(), []
    for file in site.rglob("*.html"):
        markup = file.read_text()
        for href, name in re.findall(r'<a href="([^"#]*)(?:#[^"]*)?"><code>([\w.]+)(?:\(|<)',
                                     markup):
            target = (file.parent / href).resolve()
            if ":" in href or not target.is_relative_to(site.resolve() / "api"):
                continue  # a link of the page's own text
            public = ".".join(target.relative_to(site.resolve()).parts[1:])
            # The page of the name (under a public path or where it is defined), or (a
            # constant, a module) the module's page.
            if not (public.rpartition(".")[2] == name.rpartition(".")[2]
                    or public not in pages):
                wrong.append(f"{file.relative_to(site)}: {name} -> {href}")
            linked.add(str(file.parent.relative_to(site)))
    assert not wrong, wrong[:20]
    assert len(linked) > 100  # not only the moments pages
    # A bare class name, written in the docstring of another module.
    assert re.search(r'<a href="../layers/DenseFlipout/"><code>DenseFlipout</code></a>',
                     page(site, "api/tfp_bnn/bayesianize"))
    # An argument name, even where a public function has it, stays plain.
    assert "<code>units</code>" in page(site, "api/tfp_bnn/layers/DenseFlipout")


def article(markup):
    """The page's content, without the navigation."""
    return markup[markup.index("<article"):markup.index("</article>")]


def location(file):
    """The page's location as the search index writes it ("" for the home page)."""
    path = file.parent.relative_to(site_root(file)).as_posix()
    return "" if path == "." else path + "/"


def site_root(file):
    return next(parent for parent in file.parents if (parent / "search").is_dir())


def test_search_finds_every_page_of_a_code_name(site):
    """The search index splits text as the browser's search does (Material: at tags,
    then at the configured separator); `mutual_information` is a token of every
    page that shows it."""
    index = json.loads((site / "search" / "search_index.json").read_text())
    separator = re.compile(index["config"]["separator"])

    def tokens(markup):
        return {token.lower() for block in re.split(r"<[^>]+>", markup)
                for token in separator.split(html.unescape(block)) if token}

    for word in ("mutual_information", "denseflipout", "export_predictive"):
        shown = {location(file) for file in site.rglob("index.html")
                 if re.search(rf"\b{word}\b", text_of(article(file.read_text())), re.I)}
        found = {doc["location"].split("#")[0] for doc in index["docs"]
                 if word in tokens(doc["title"]) | tokens(doc["text"])}
        assert len(shown) >= 3 and not shown - found, (word, sorted(shown - found))


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

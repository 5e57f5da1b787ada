"""The site's hooks and griffe extension (.ci/docs), on small inputs, without a build.

test_site.py shows the whole site builds; these show that the checks it
relies on can fail: a missing or unread docstring section is a warning
(so `--strict` fails), and the Keras sections reach griffe as sections.
"""

import importlib.util
import logging
import pathlib
import re

import griffe
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load("hooks")
griffe_keras = hooks.griffe_keras


def function(docstring, parameters=("x",)):
    """A griffe function `f(*parameters)` with `docstring`, read as the site reads it."""
    fn = griffe.Function("f", parameters=griffe.Parameters(
        *(griffe.Parameter(name) for name in parameters)))
    fn.docstring = griffe.Docstring(griffe_keras.keras_sections(docstring), parent=fn,
                                    parser=griffe.Parser.google,
                                    parser_options={"warnings": False})
    return fn


KERAS_STYLE = """Summary.

Args:
    x: a value.

Call arguments:
    inputs: a tensor.
    training: a flag.

Returns:
    Its double.

Example:

>>> f(1)
2
"""


def test_keras_sections_become_griffe_sections():
    rewritten = griffe_keras.keras_sections(KERAS_STYLE)
    assert len(rewritten.split("\n")) == len(KERAS_STYLE.split("\n"))  # warnings keep lines
    sections = {section.title: section for section in function(KERAS_STYLE).docstring.parsed
                if section.kind is not griffe.DocstringSectionKind.text}
    assert list(sections) == ["Args:", "Call arguments:", None, "Example:"]
    assert [p.name for p in sections["Call arguments:"].value] == ["inputs", "training"]
    assert sections["Example:"].kind is griffe.DocstringSectionKind.examples
    assert sections["Example:"].value[0][1] == ">>> f(1)\n2"


@pytest.mark.parametrize("docstring, message", [
    ("Summary.\n\nArgs:\n    x: a value.\n", "no Example section"),
    ("Summary.\n\nExample:\n>>> f(1)\n", "no Args section (arguments: x)"),
    ("Summary.\n\nArgs:\n    x: a value.\nReturns:\n    y.\n\nExample:\n>>> f(1)\n",
     "'Returns:' is not read as a section"),
    ("Summary.\n\nArgs:\n    x: a value.\nExample:\n>>> f(1)\n",
     "'Examples: Example:' is not read as a section"),
])
def test_missing_or_unread_section_is_a_warning(docstring, message, caplog):
    with caplog.at_level(logging.WARNING, logger=hooks.log.name):
        hooks._check_sections("demo.f", function(docstring))
    assert any(message in record.getMessage() for record in caplog.records), caplog.text


def test_complete_docstring_passes(caplog):
    with caplog.at_level(logging.WARNING, logger=hooks.log.name):
        hooks._check_sections("demo.f", function(KERAS_STYLE))
    assert not caplog.records, caplog.text


def test_links_to_repository_files(caplog):
    site = {"colab/quickstart.ipynb": "colab/quickstart.ipynb"}
    text = "[a](colab/quickstart.ipynb) [b](setup.py#L1) [c](https://x.org/) `[d](nope.md)`"
    with_url = hooks.rewrite_links(text, "guide/page.md", site, "https://repo")
    assert with_url.startswith("[a](../colab/quickstart.ipynb) [b](https://repo/blob/main/setup.py#L1)"
                               " [c](https://x.org/)")
    assert hooks.rewrite_links("[b](setup.py)", "index.md", site, None) == "b"
    fenced = "```\n[b](setup.py)\n```"
    assert hooks.rewrite_links(fenced, "index.md", site, None) == fenced
    with caplog.at_level(logging.WARNING, logger=hooks.log.name):
        hooks.rewrite_links("[x](no/such/file.md)", "index.md", site, None)
    assert "not in the repository" in caplog.text


def test_public_objects_as_python_binds_them():
    packages = hooks.load_packages(ROOT)
    tfp_bnn = dict(griffe_keras.public_objects(packages["tfp_bnn"])["tfp_bnn.moments"])
    # `from tfp_bnn.moments.relu import relu` replaces the submodule by the function.
    assert tfp_bnn["relu"].is_function and tfp_bnn["relu"].path == "tfp_bnn.moments.relu.relu"
    zoo = dict(griffe_keras.public_objects(packages["zoo"])["zoo"])
    # zoo's names are bound lazily by a module __getattr__; each resolves to its definition.
    assert zoo["build_model"].final_target.path == "zoo.models.registry.build_model"
    assert zoo["auto"].final_target.is_function


# -- Home and Getting started: the README's install commands and first example (test_site.py
# checks the built pages) --
HOME_README = """# pkg

Intro.

## Install and run

```bash
pip install pkg
```

```python
import pkg
### not a heading: inside a fence
```

### Later

Details.

## Usage

More.
"""


def test_home_page_is_the_intro_and_the_quick_start():
    intro, sections = hooks.readme_sections(HOME_README)
    home = hooks.home_page(intro, sections)
    assert home.startswith("# pkg\n\nIntro.")
    assert "pip install pkg" in home and "import pkg\n### not a heading" in home
    assert "Details." not in home and "More." not in home


def test_home_page_without_a_getting_started_section_is_the_whole_readme():
    intro, sections = hooks.readme_sections(HOME_README.replace("## Install and run", "## Setup"))
    home = hooks.home_page(intro, sections)
    assert "pip install pkg" in home and "Details." in home and "More." in home


def _first_python_block(text):
    return re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)


def test_readme_home_page_has_install_and_python_example():
    readme = (ROOT / "README.md").read_text()
    intro, sections = hooks.readme_sections(readme)
    home = hooks.home_page(intro, sections)
    getting_started = dict(sections)[hooks.GETTING_STARTED]
    example = _first_python_block(readme)
    assert "model.fit(" in example and "tfp_bnn.predict." in example
    for page in (home, getting_started):
        assert re.search(r"^pip install ", page, re.M)
        assert _first_python_block(page) == example


# -- api_links: code names linked to their pages, source links ----------------------------
api_links = hooks.api_links


def name_index():
    index = api_links.NameIndex()
    index.add("pkg.layers", "api/pkg/layers/index.md", module="pkg", is_module=True)
    index.add("pkg.layers.DenseFlipout", "api/pkg/layers/DenseFlipout.md", module="pkg.layers",
              defined="pkg.layers.flipout.DenseFlipout")
    index.add("pkg.DenseFlipout", "api/pkg/layers/DenseFlipout.md", module="pkg")
    index.add("pkg.predict.regression", "api/pkg/predict/regression.md", module="pkg.predict")
    index.add("pkg.priors.get", "api/pkg/priors/get.md", module="pkg.priors")
    index.add("pkg.posteriors.get", "api/pkg/posteriors/get.md", module="pkg.posteriors")
    index.add("pkg.data.steps_per_epoch", "api/pkg/data/steps_per_epoch.md", module="pkg.data")
    index.add("pkg.flows.FLOWS", "api/pkg/flows/index.md", anchor="pkg.flows.FLOWS",
              module="pkg.flows")
    index.words.add("steps_per_epoch")  # also an argument somewhere
    return index


@pytest.mark.parametrize("span, page, href", [
    ("pkg.layers.DenseFlipout", "guide/usage/", "../../api/pkg/layers/DenseFlipout/"),
    ("pkg.DenseFlipout", "guide/usage/", "../../api/pkg/layers/DenseFlipout/"),
    ("pkg.layers.flipout.DenseFlipout", "guide/usage/", "../../api/pkg/layers/DenseFlipout/"),
    ("layers.DenseFlipout", "api/pkg/predict/", "../layers/DenseFlipout/"),
    ("DenseFlipout", "api/pkg/predict/regression/", "../../layers/DenseFlipout/"),
    ("predict.regression", "benchmarks/", "../api/pkg/predict/regression/"),
    ("regression(model, x, T)", "benchmarks/", "../api/pkg/predict/regression/"),
    ("regression", "api/pkg/predict/", "regression/"),  # a plain word, on its module's page
    ("FLOWS", "api/pkg/flows/", "#pkg.flows.FLOWS"),
    ("FLOWS", "guide/usage/", "../../api/pkg/flows/#pkg.flows.FLOWS"),
    ("steps_per_epoch(n, batch)", "guide/usage/", "../../api/pkg/data/steps_per_epoch/"),
    ("layers", "api/pkg/", "layers/"),
])
def test_code_span_naming_a_public_object_links_to_its_page(span, page, href):
    html = f"<p>Use <code>{span}</code>.</p>"
    assert name_index().link_code_spans(html, page) == \
        f'<p>Use <a href="{href}"><code>{span}</code></a>.</p>'


@pytest.mark.parametrize("html, page", [
    ("<p><code>keras.layers.Dense</code></p>", "guide/usage/"),  # no public object
    ("<p><code>units</code></p>", "guide/usage/"),
    ("<p><code>get</code></p>", "api/pkg/priors/"),  # two objects have the name
    ("<p><code>regression</code></p>", "guide/usage/"),  # a plain word, elsewhere
    ("<p><code>steps_per_epoch</code></p>", "api/pkg/data/"),  # also an argument
    ("<p><code>layers</code></p>", "api/pkg/predict/"),  # a subpackage, not on its package
    ("<p><code>DenseFlipout</code></p>", "api/pkg/layers/DenseFlipout/"),  # its own page
    ('<pre><code>DenseFlipout</code></pre>', "guide/usage/"),
    ('<h2 id="x"><code>DenseFlipout</code></h2>', "guide/usage/"),
    ('<a href="elsewhere/"><code>DenseFlipout</code></a>', "guide/usage/"),
])
def test_other_code_spans_stay_plain(html, page):
    assert name_index().link_code_spans(html, page) == html


def test_object_headings_link_to_their_source_lines():
    heading = ('<h2 id="pkg.f" class="doc doc-heading"><span>pkg.f</span>'
               '<a href="#pkg.f" class="headerlink" title="Permanent link">&para;</a></h2>')
    prose = '<h2 id="usage">Usage<a href="#usage" class="headerlink">&para;</a></h2>'
    where = {"pkg.f": ("pkg/f.py", 3, 9)}.get
    linked = api_links.source_links(heading + prose, where, "https://repo")
    assert 'href="https://repo/blob/main/pkg/f.py#L3-L9"' in linked
    assert linked.count("doc-source-link") == 1 and linked.endswith(prose)
    assert api_links.source_links(heading, where, None) == heading  # no repository


def test_griffe_resolver_finds_the_definition_lines():
    packages = hooks.load_packages(ROOT)
    resolve = api_links.griffe_resolver(packages["tfp_bnn"].modules_collection, ROOT)
    path, first, last = resolve("tfp_bnn.predict.regression.regression")
    assert path == "tfp_bnn/predict/regression.py"
    assert "def regression(" in "\n".join(
        (ROOT / path).read_text().split("\n")[first - 1:last])
    # A re-exported name (an alias): the file that defines it.
    assert resolve("tfp_bnn.layers.DenseFlipout")[0] == "tfp_bnn/layers/variational/dense_flipout.py"
    assert resolve("usage") is None

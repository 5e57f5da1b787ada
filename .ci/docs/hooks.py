"""MkDocs hooks: the site's pages, made at build time from the repository's own files.

Nothing is copied into .ci/docs; every page is generated here (MkDocs
`File.generated`) from:

- README.md: the text before `## Install and run`, then that section's quick
  start (up to its first `### `: the install commands and the first Python
  example), is the home page, the whole section the getting-started page,
  `## From tfp.layers to tfp_bnn` the
  migration page, `## Tutorials` the index of the tutorials, and every other
  `## ` section a guide page of its own (its headings one level up);
- BENCHMARKS.md: the benchmarks page;
- colab/*.ipynb: one page each (at the same path on the site), rendered with their stored outputs by
  mkdocs-jupyter (nothing is executed);
- the packages' public names (griffe_keras.public_objects: `tfp_bnn.__all__`,
  the `__all__` of every module it exports, `zoo.__all__`): one page per
  class or function, rendered from its docstring by mkdocstrings, and a page
  per module with its docstring, a table of its names and its constants; a
  new public name gets its page without any edit here;
- `python -m zoo --help` and the help of each command, for the CLI page.

An API page is titled by the public name users import, in its heading and
in the browser's title. On every page but the tutorials, a code span that
names a public object links to its page, and each object's heading links
to its lines in the repository (api_links.py).

Links in README.md and BENCHMARKS.md that point at repository files become
links to the page made from that file (colab/X.ipynb, BENCHMARKS.md, ...),
or to the file in the repository (`url=` in setup.py), or plain text when
setup.py names no repository.

Each docstring rendered as a page must have an Example section, and an Args
section when its signature takes named arguments: a missing one is a
warning, so `mkdocs build --strict` fails (griffe itself warns about broken
sections and documented arguments that do not exist). The complete rules,
examples run included, are tested by tests/integration/test_docstrings.py.

The pages load no code from the network: mkdocs-jupyter's notebook HTML
brings MathJax (with an empty `src`) and a Mermaid loader that imports from
a CDN, which the tutorials do not need (the house style writes math in
ASCII; no notebook draws a diagram), so `on_post_page` removes every
<script> that names another host or has an empty `src`.
"""

import ast
import logging
import os
import pathlib
import posixpath
import re
import subprocess
import sys

import griffe
from markdown.extensions.toc import slugify
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import api_links  # noqa: E402 - lives beside this file
import griffe_keras  # noqa: E402 - lives beside this file

log = logging.getLogger("mkdocs.plugins.tfp_bnn_site")

PACKAGES = ("tfp_bnn", "zoo")
# README sections with a page of their own: section title -> (page, title in the nav).
GETTING_STARTED = "Install and run"
README_PAGES = {
    GETTING_STARTED: ("getting-started.md", "Getting started"),
    "From tfp.layers to tfp_bnn": ("migration.md", "From tfp.layers"),
    "Tutorials": ("colab/index.md", "Tutorials"),
}
CLI_PAGE = "api/zoo/cli.md"

_FENCE = re.compile(r"^\s*(```|~~~)")
_SECTION_TITLE = re.compile(
    r"^\s*(Args|Arguments|Call arguments|Returns|Yields|Raises|Examples?|Attributes"
    r"|Other parameters):( [A-Za-z ]+:)?\s*$")  # griffe_keras writes "Examples: Example:"
# A code span (left as it is) or a Markdown link.
_LINK = re.compile(r"(`+)[\s\S]*?\1|(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S)
_REMOTE = re.compile(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]+/")

# Filled by on_config: {page uri: markdown}, and {page uri: notebook path}; the public
# names' pages, and (resolve, repository URL) for the source links.
_pages = {}
_notebooks = {}
_names = api_links.NameIndex()
_source = {}


# -- reading the repository's files -------------------------------------------------------
def _outside_fences(text, change):
    """`text` with `change(chunk)` applied to every chunk outside fenced code blocks."""
    segments, fenced = [[False, []]], False
    for line in text.split("\n"):
        opens = _FENCE.match(line) and not fenced
        if opens:
            segments.append([True, []])
        segments[-1][1].append(line)
        if _FENCE.match(line):
            fenced = not fenced
            if not fenced:
                segments.append([False, []])
    return "\n".join("\n".join(lines) if is_fence else change("\n".join(lines))
                     for is_fence, lines in segments if lines)


def readme_sections(text):
    """(text before the first `## ` heading, [(title, section text)]), fences respected."""
    intro, sections, fenced = [], [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            sections.append((line[3:].strip(), [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            intro.append(line)
    return "\n".join(intro), [(title, "\n".join(lines)) for title, lines in sections]


def quick_start(section):
    """`section` (a README section) up to its first `### ` heading, fences respected."""
    lines, fenced = [], False
    for line in section.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("### "):
            break
        lines.append(line)
    return "\n".join(lines).rstrip("\n") + "\n"


def home_page(intro, sections):
    """The home page's Markdown: the README's intro, the sections before the
    getting-started one, then that section's quick start (install, first example)."""
    titles = [title for title, _ in sections]
    home = titles.index(GETTING_STARTED) if GETTING_STARTED in titles else len(titles)
    start = [quick_start(sections[home][1])] if home < len(sections) else []
    return "\n".join([intro] + [text for _, text in sections[:home]] + start)


def repository_url(root):
    """The `url=` of setup.py's setup() call, or None."""
    tree = ast.parse((root / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for keyword in node.keywords:
                if keyword.arg == "url" and isinstance(keyword.value, ast.Constant):
                    return keyword.value.value.rstrip("/")
    return None


def rewrite_links(text, page, site_paths, repo_url):
    """Links to repository files in `text` (a page at `page`) made to work on the site.

    `site_paths` maps repository paths to site pages; other existing files
    link to the repository at `repo_url`, or lose their link without one.
    """
    def one(match):
        code, image, label, target = match.groups()
        if code or re.match(r"^[a-z][a-z0-9+.-]*:|^#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        anchor = f"#{anchor}" if anchor else ""
        if path in site_paths:
            relative = posixpath.relpath(site_paths[path], posixpath.dirname(page) or ".")
            return f"{image}[{label}]({relative}{anchor})"
        if not (ROOT / path).exists():
            log.warning(f"{page}: link to {target!r}, which is not in the repository")
            return match.group(0)
        if repo_url:
            return f"{image}[{label}]({repo_url}/blob/main/{path}{anchor})"
        return label

    return _outside_fences(text, lambda chunk: _LINK.sub(one, chunk))


def _one_level_up(text):
    return _outside_fences(text, lambda chunk: re.sub(r"(?m)^#(#+ )", r"\1", chunk))


# -- the API pages ------------------------------------------------------------------------
def _api_uri(module_path, name=None):
    folder = "api/" + module_path.replace(".", "/")
    return f"{folder}/index.md" if name is None else f"{folder}/{name}.md"


def _summary(obj):
    """The first line of `obj`'s docstring; for a constant without one, its value."""
    if obj.docstring is not None:
        text = obj.docstring.value.strip().split("\n")[0]
    elif obj.is_attribute and obj.value is not None:
        value = str(obj.value)
        text = f"`= {value if len(value) <= 60 else value[:57] + '...'}`"
    else:
        text = ""
    return text.replace("|", "\\|")


def _named_parameters(obj):
    try:
        parameters = obj.parameters
    except (AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return []
    return [p.name for p in parameters if p.name not in ("self", "cls")
            and p.kind not in (griffe.ParameterKind.var_positional,
                               griffe.ParameterKind.var_keyword)]


def _unread_headers(path, obj):
    """Warn about section titles that griffe read as plain text.

    Griffe skips such a section silently (a debug message): the title has no
    blank line above it, or its body is not indented. On the page it would be
    a paragraph that starts "Returns:".
    """
    for section in obj.docstring.parsed:
        if section.kind is griffe.DocstringSectionKind.text:
            for line in section.value.split("\n"):
                if _SECTION_TITLE.match(line):
                    log.warning(f"{path}: '{line.strip()}' is not read as a section (a blank "
                                "line above it? its entries indented below it?)")


def _check_sections(path, obj):
    """Warn (so the strict build fails) when `obj`'s docstring lacks or breaks a section.

    Required: Example, and Args when the signature takes named arguments.
    Checked for unread section titles: the object and its public members.
    """
    if obj.docstring is None or not obj.docstring.value.strip():
        log.warning(f"{path}: no docstring")
        return
    kinds = {section.kind for section in obj.docstring.parsed}
    if griffe.DocstringSectionKind.examples not in kinds:
        log.warning(f"{path}: no Example section")
    if _named_parameters(obj) and griffe.DocstringSectionKind.parameters not in kinds:
        log.warning(f"{path}: no Args section (arguments: {', '.join(_named_parameters(obj))})")
    _unread_headers(path, obj)
    for name, member in obj.members.items():
        if not name.startswith("_") and not member.is_alias and member.docstring is not None:
            _unread_headers(f"{path}.{name}", member)


def load_packages(root):
    """The griffe modules of PACKAGES, read from source as mkdocstrings reads them."""
    loader = griffe.GriffeLoader(
        search_paths=[str(root)],
        extensions=griffe.load_extensions(griffe_keras.KerasDocstrings),
        docstring_parser=griffe.Parser.google,
        # Only the section kinds are read here; mkdocstrings parses again, with warnings.
        docstring_options={"warnings": False, "returns_multiple_items": False})
    return {package: loader.load(package) for package in PACKAGES}


def _member_words(obj):
    """The names of `obj`'s arguments, and of its public members and their arguments."""
    if obj.is_module:
        return set()
    words = set(_named_parameters(obj))
    for name, member in obj.members.items():
        if not name.startswith("_") or name in ("__init__", "__call__"):
            words.add(name)
            words.update(_named_parameters(member))
    return words - {"__init__", "__call__"}


def _api_page(identifier, title):
    """The markdown of the page of one class or function, titled by its public name.

    The title is the name users import (`tfp_bnn.predict.regression`), also
    where the object is rendered under the path of its definition
    (`tfp_bnn.predict.regression.regression`); the front matter makes it the
    browser's title too, which the short name of the navigation would not
    keep unique (`tfp_bnn.priors.get`, `tfp_bnn.posteriors.get`).
    """
    options = "" if identifier == title else \
        f"\n    options:\n      heading: {title}\n      toc_label: {title.rpartition('.')[2]}"
    return f"---\ntitle: {title}\n---\n\n::: {identifier}{options}\n"


def api_pages(root, names=None, source=None):
    """({page uri: markdown}, nav entries) for every public name of PACKAGES.

    Fills `names` (an api_links.NameIndex) with the page of every public
    name, and `source` with what api_links.source_links needs.
    """
    names = api_links.NameIndex() if names is None else names
    pages, nav, rendered = {}, [], {}
    index = ["# API reference", "",
             "Every public name of the packages, from its docstring.", "",
             "| Module | Summary |", "|---|---|"]
    for package, module in load_packages(root).items():
        if source is not None:
            source["resolve"] = api_links.griffe_resolver(module.modules_collection, root)
        public = griffe_keras.public_objects(module)
        package_nav = []
        for module_path, members in public.items():
            module_obj = module.modules_collection[module_path]
            index.append(f"| [`{module_path}`]({_api_uri(module_path)[4:]}) | "
                         f"{_summary(module_obj)} |")
            page, entries = _module_page(module_path, members, rendered)
            pages[_api_uri(module_path)] = page
            for name, member in members:
                obj = griffe_keras.target_of(member)
                identifier, uri = rendered[id(obj)]
                names.add(f"{module_path}.{name}", uri, module=module_path, defined=obj.path,
                          anchor=identifier if obj.is_attribute else "", is_module=obj.is_module)
                names.words.update(_member_words(obj))
            for name, uri in entries:
                obj = griffe_keras.target_of(dict(members)[name])
                pages[uri] = _api_page(rendered[id(obj)][0], f"{module_path}.{name}")
            package_nav.append({module_path: [_api_uri(module_path)]
                                + [{name: uri} for name, uri in entries]})
        if package == "zoo":
            package_nav[0]["zoo"].append({"Command line (python -m zoo)": CLI_PAGE})
        nav.extend(package_nav)
    index.append(f"| [`python -m zoo`]({CLI_PAGE[4:]}) | The command line: list, train, evaluate, "
                 "benchmark. |")
    pages["api/index.md"] = "\n".join(index) + "\n"
    return pages, nav


def _module_page(module_path, names, rendered):
    """(markdown of a module's page, [(name, uri)] of the pages it adds); fills `rendered`.

    `rendered` maps an object's id to (the identifier it is rendered under,
    its page): an object exported twice is documented once, under its first
    name, and the second name links there.
    """
    lines = [f"# {module_path}", "", f"::: {module_path}",
             "    options:", "      members: false", "      show_root_heading: false",
             "      show_root_toc_entry: false", "",
             "| Name | Summary |", "|---|---|"]
    constants, entries = [], []
    here = _api_uri(module_path)
    for name, member in names:
        obj = griffe_keras.target_of(member)
        public_path = f"{module_path}.{name}"
        if id(obj) not in rendered:
            if obj.is_module:
                rendered[id(obj)] = (obj.path, _api_uri(obj.path))
            elif obj.is_attribute:
                rendered[id(obj)] = (public_path, here)
                constants.append(public_path)
            else:
                # A name the package imports over its own submodule is documented at
                # its definition (under the name, griffe would render the submodule).
                shadowed = not member.is_alias and obj.parent.path != module_path
                identifier = obj.path if shadowed else public_path
                uri = _api_uri(module_path, name)
                rendered[id(obj)] = (identifier, uri)
                entries.append((name, uri))
                _check_sections(identifier, obj)
        identifier, uri = rendered[id(obj)]
        relative = posixpath.relpath(uri, posixpath.dirname(here))
        anchor = f"#{identifier}" if uri == here else ""
        link = relative if uri != here else anchor
        lines.append(f"| [`{name}`]({link}) | {_summary(obj)} |")
    if constants:
        lines += ["", "## Constants", ""]
        for path in constants:
            lines += [f"::: {path}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines) + "\n", entries


def cli_page(root):
    """The CLI page: zoo.cli's docstring, then `--help` of the program and each command."""
    script = (
        "import sys\n"
        "from zoo import cli\n"
        "from zoo.experiments import uci_benchmark_args\n"
        "parser = cli.build_parser()\n"
        "commands = parser._subparsers._group_actions[0].choices\n"
        "print(parser.format_help())\n"
        "for name, sub in commands.items():\n"
        "    if name == 'benchmark':\n"
        "        sub = uci_benchmark_args.build_parser()\n"
        "    print('\\f' + name)\n"
        "    print(sub.format_help())\n")
    env = dict(os.environ, COLUMNS="78", PYTHONPATH=str(root))  # the width of a code block
    result = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        log.warning(f"the CLI's --help could not be read: {result.stderr.strip()[-500:]}")
    main, *commands = result.stdout.split("\f")
    lines = ["# Command line: python -m zoo", "", "::: zoo.cli",
             "    options:", "      members: false", "      show_root_heading: false",
             "      show_root_toc_entry: false", "",
             "## python -m zoo --help", "", "```text", main.rstrip(), "```", ""]
    for command in commands:
        name, _, text = command.partition("\n")
        lines += [f"## python -m zoo {name}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


# -- MkDocs events ------------------------------------------------------------------------
def on_config(config):
    """Reads the repository, makes every page's text, and the navigation from them."""
    _pages.clear()
    _notebooks.clear()
    # Not set as the theme's repo_url: Material would fetch the repository's stars
    # from GitHub's API on every page view.
    repo_url = repository_url(ROOT)
    notebooks = sorted((ROOT / "colab").glob("*.ipynb"))
    site_paths = {"README.md": "index.md", "BENCHMARKS.md": "benchmarks.md",
                  "colab/": "colab/index.md", "colab": "colab/index.md"}
    site_paths.update({f"colab/{nb.name}": f"colab/{nb.name}" for nb in notebooks})

    intro, sections = readme_sections((ROOT / "README.md").read_text())
    titles = [title for title, _ in sections]
    for title in README_PAGES:
        if title not in titles:
            log.warning(f"README.md has no '## {title}' section (hooks.README_PAGES)")
    home = titles.index(GETTING_STARTED) if GETTING_STARTED in titles else len(titles)
    _pages["index.md"] = rewrite_links(home_page(intro, sections), "index.md", site_paths,
                                       repo_url)
    guide, nav_pages = [], {}
    for title, text in sections[home:]:
        uri, nav_title = README_PAGES.get(title, (f"guide/{slugify(title, '-')}.md", title))
        _pages[uri] = rewrite_links(_one_level_up(text), uri, site_paths, repo_url)
        nav_pages[title] = {nav_title: uri}
        if title not in README_PAGES:
            guide.append({nav_title: uri})
    _pages["benchmarks.md"] = rewrite_links(
        (ROOT / "BENCHMARKS.md").read_text(), "benchmarks.md", site_paths, repo_url)

    # Tutorials in the order the README lists them, then any it does not list.
    tutorials_text = dict(sections).get("Tutorials", "")
    listed = sorted(notebooks, key=lambda nb: (tutorials_text.find(f"colab/{nb.name}") < 0,
                                               tutorials_text.find(f"colab/{nb.name}"),
                                               nb.name))
    for nb in listed:
        _notebooks[f"colab/{nb.name}"] = nb

    _names.__init__()
    _source.clear()
    _source["repo_url"] = repo_url
    api, api_nav = api_pages(ROOT, _names, _source)
    _pages.update(api)
    _pages[CLI_PAGE] = cli_page(ROOT)

    config.nav = [
        {"Home": "index.md"},
        nav_pages.get(GETTING_STARTED, {"Getting started": "index.md"}),
        {"Guide": guide},
        nav_pages.get("From tfp.layers to tfp_bnn", {"From tfp.layers": "index.md"}),
        {"Tutorials": ["colab/index.md"] + list(_notebooks)},
        {"Benchmarks": "benchmarks.md"},
        {"API reference": ["api/index.md"] + api_nav},
    ]
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns notebooks into pages
def on_files(files, config):
    """Adds the generated pages and the notebooks to the site's files."""
    for uri, text in _pages.items():
        files.append(File.generated(config, uri, content=text))
    # Read from the repository root, at the same path: mkdocs-jupyter's notebook pages
    # find their file through src_dir, which a File.generated(abs_src_path=) lacks.
    for uri in _notebooks:
        files.append(File(uri, src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


def _local_script(match):
    """A <script> element, or nothing when it loads code from another host (or is empty)."""
    attributes, body = match.groups()
    if "x-mathjax-config" in attributes:
        return ""  # the configuration of the MathJax removed below
    source = re.search(r'\bsrc="([^"]*)"', attributes)
    if (source and (not source.group(1) or _REMOTE.match(source.group(1)))) \
            or _REMOTE.search(body):
        return ""
    return match.group(0)


def on_page_content(html, page, config, files):
    """Links the public names that code spans mention, and each object to its source."""
    if page.file.src_uri.endswith(".ipynb"):
        return html  # nbconvert's markup; the tutorials link by their text
    html = _names.link_code_spans(html, page.url)
    return api_links.source_links(html, _source.get("resolve", lambda _: None),
                                  _source.get("repo_url"))


def on_post_page(output, page, config):
    """Removes scripts that would load code from a CDN (see the module docstring)."""
    return _SCRIPT.sub(_local_script, output)

"""Links on the site's rendered pages: API names in code spans, and source links.

`NameIndex` maps every public name to the page that documents it. Its
`link_code_spans(html, page_url)` makes a `<code>` span that names a public
object into a link to that object's page, without editing docstrings:

- a full public path (`tfp_bnn.layers.DenseFlipout`, `tfp_bnn.DenseFlipout`,
  `zoo.build_model`) or the path where the object is defined;
- a shorter dotted path, as prose often writes it (`layers.DenseFlipout`,
  `predict.regression`), when one object ends with it;
- a bare name (`DenseFlipout`), when one object has it and it says it is
  code: a class name, a constant, a name with an underscore; a plain word
  (`sample`, `get`, `regression`) links only on the pages of its own
  module, where it cannot mean something else;
- any of them written as a call (`regression(model, x, T)`, `auto()`).

Code in code blocks, in headings and in links stays as it is, and so does a
name that no public object has (an argument, a Keras name) or that two
objects share. A page does not link to itself.

`source_links(html, resolve, repo_url)` adds, to every heading mkdocstrings
writes for an object, a link to the lines of the file that defines it in the
repository (its main branch).
"""
# Both run on the HTML of a page's content (MkDocs' on_page_content), which
# mkdocstrings and Python-Markdown have written: their markup is regular.

import posixpath
import re

from mkdocs.utils import get_relative_url

# A code span outside a link; group 1 its text.
_CODE = re.compile(r"<code>([A-Za-z_][\w.]*)(\([^<]*\))?</code>")
# Regions left alone: code blocks, headings, links.
_SKIP = re.compile(r"<pre\b.*?</pre>|<h[1-6]\b.*?</h[1-6]>|<a\b.*?</a>", re.S)
_HEADING = re.compile(r'(<h[1-6] id="([^"]+)" class="doc doc-heading">.*?)'
                      r'(<a href="#[^"]*" class="headerlink")', re.S)


def page_url(uri):
    """The URL (directory style) of the page made from `uri` ("api/x/y.md" -> "api/x/y/")."""
    path = uri[:-3]
    if path == "index" or path.endswith("/index"):
        path = path[:-5]
    return path if path.endswith("/") or not path else path + "/"


class NameIndex:
    """Every public name of the packages and the page that documents it."""

    def __init__(self):
        self._paths = {}   # full dotted path -> (page url, anchor)
        self._short = {}   # shorter dotted path or bare name -> {(page url, anchor)}
        self._home = {}    # (page url, anchor) -> (url of its module's page, is a module)
        # Names that also mean something else: arguments, attributes and methods.
        self.words = set()

    def add(self, path, uri, anchor="", module=None, defined=None, is_module=False):
        """Records public `path` (and where it is `defined`), documented at page `uri`."""
        target = (page_url(uri), anchor)
        home = page_url(f"api/{(module or path.rpartition('.')[0]).replace('.', '/')}/index.md")
        self._home.setdefault(target, (home, is_module))
        for name in {path, defined or path}:
            self._paths[name] = target
            parts = name.split(".")
            for start in range(1, len(parts)):
                self._short.setdefault(".".join(parts[start:]), set()).add(target)

    def __len__(self):
        return len(self._paths)

    def target(self, name, page, called=False):
        """(url, anchor) that the code span `name` on page `page` links to, or None.

        `called`: the span is a call, `name(...)`.
        """
        if name in self._paths:
            return self._paths[name]
        targets = self._short.get(name, set())
        if len(targets) != 1:
            return None
        target = next(iter(targets))
        if "." in name:
            return target
        home, is_module = self._home[target]
        if is_module:  # `data`, `layers`: said of a subpackage on its package's page only
            return target if page == home else None
        if name in self.words and not called:
            return None  # `accuracy`, `steps_per_epoch`: also an argument or an attribute
        if _looks_like_code(name) or called:
            return target
        # A plain word (`sample`, `get`): on its module's page and its names' pages only.
        return target if page == home or posixpath.dirname(page.rstrip("/")) + "/" == home \
            else None

    def link_code_spans(self, html, page):
        """`html` (the content of the page at URL `page`) with public names linked."""
        def one(match):
            found = self.target(match.group(1), page, called=bool(match.group(2)))
            if found is None:
                return match.group(0)
            url, anchor = found
            if url == page and not anchor:
                return match.group(0)
            href = get_relative_url(url, page) if url != page else ""
            return f'<a href="{href}{"#" + anchor if anchor else ""}">{match.group(0)}</a>'

        out, position = [], 0
        for skip in _SKIP.finditer(html):
            out.append(_CODE.sub(one, html[position:skip.start()]))
            out.append(skip.group(0))
            position = skip.end()
        out.append(_CODE.sub(one, html[position:]))
        return "".join(out)


def _looks_like_code(name):
    return "_" in name or name[:1].isupper()


def source_links(html, resolve, repo_url):
    """`html` with a "source" link after each object heading whose id `resolve` knows.

    `resolve(identifier)` gives (repository path, first line, last line) or None.
    """
    if not repo_url:
        return html

    def one(match):
        where = resolve(match.group(2))
        if where is None:
            return match.group(0)
        path, first, last = where
        lines = f"#L{first}-L{last}" if first and last else ""
        # Not part of the heading's title in the search index.
        link = (f'<a class="doc-source-link" href="{repo_url}/blob/main/{path}{lines}" '
                f'title="Source code on the main branch" data-search-exclude>source</a> ')
        return match.group(1) + link + match.group(3)

    return _HEADING.sub(one, html)


def griffe_resolver(collection, root):
    """A `resolve(identifier)` for `source_links` reading griffe's `collection`."""
    def resolve(identifier):
        try:
            obj = collection[identifier]
            obj = obj.final_target if obj.is_alias else obj
            path = obj.filepath
        except Exception:  # noqa: BLE001 - an id that names no object (a heading of prose)
            return None
        if isinstance(path, list) or path is None:
            return None
        try:
            relative = posixpath.join(*path.resolve().relative_to(root).parts)
        except ValueError:
            return None
        if obj.is_module:
            return relative, None, None
        return relative, obj.lineno, obj.endlineno

    return resolve

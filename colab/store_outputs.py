"""Run the Colab tutorials top to bottom and store their outputs in the notebooks.

    python colab/store_outputs.py [NAME ...]           # all notebooks when no NAME is given
    python colab/store_outputs.py --repository-only    # rewrite the GitHub addresses only

The notebooks are kept with their outputs (figures, tables, printed scores), so
that GitHub and the documentation site show them without running anything.
Each is executed in a fresh `python3` kernel in a temporary working directory
(the figures and runs it writes land there, never in colab/), then written back
atomically with its outputs and execution counts; a notebook whose run fails is
left as it was. tests/colab/test_notebooks.py re-executes every notebook and
fails when its outputs differ in kind from the stored ones (see
`output_kinds`): run this script again after changing a notebook. The test
runs each notebook with its settings (epochs, Monte Carlo samples) cut down,
in a cell injected after the one tagged "parameters" (`with_parameters`);
this script always runs them at full size.

The repository address has one home, setup.py's `url=`. Every run (and
`--repository-only`, which executes nothing) rewrites each notebook's "Open in
Colab" badge and install cell, and colab/README.md's badges, from it.
"""

import argparse
import ast
import contextlib
import copy
import os
import pathlib
import re
import secrets
import sys
import tempfile

import nbformat

COLAB = pathlib.Path(__file__).resolve().parent
CHECKOUT = COLAB.parent
CELL_TIMEOUT = 600  # seconds; a whole notebook takes 10-40 s on two CPU cores
GITHUB = "https://github.com/"
COLAB_GITHUB = "https://colab.research.google.com/github/"
BRANCH = "main"

# The kernel's environment. matplotlib's inline backend (what Jupyter uses
# anyway) draws plt.show() figures into the outputs without a display; Agg
# would make plt.show() a no-op and the figure would never be stored.
KERNEL_ENV = {
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
# TensorFlow's C++ start-up lines (oneDNN, CUDA probing) are written straight
# to file descriptor 2 and depend on the machine. Not capturing descriptor
# output keeps them out of the notebooks; Python's own warnings still show.
KERNEL_ARGUMENTS = ["--IPKernelApp.capture_fd_output=False"]

_BADGE_LINK = re.compile(re.escape(COLAB_GITHUB) + r"[^\s()]+?/blob/[^\s()/]+/colab/")
_INSTALL_SOURCE = re.compile(r"git\+https://[^\s\"']+")


def notebook_names() -> list[str]:
    return sorted(path.name for path in COLAB.glob("*.ipynb"))


def repository_url(setup_py: pathlib.Path = CHECKOUT / "setup.py") -> str:
    """The `url=` string of the `setup(...)` call, read without running setup.py."""
    for node in ast.walk(ast.parse(setup_py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for keyword in node.keywords:
                if keyword.arg == "url":
                    if not isinstance(keyword.value, ast.Constant) or not isinstance(
                            keyword.value.value, str):
                        raise ValueError(f"{setup_py}: url= must be a string literal.")
                    url = keyword.value.value
                    if not re.fullmatch(re.escape(GITHUB) + r"[\w.-]+/[\w.-]+", url) \
                            or url.endswith(".git"):
                        raise ValueError(f"{setup_py}: url= must be {GITHUB}OWNER/NAME "
                                         f"(Colab opens notebooks from GitHub), got {url!r}.")
                    return url
    raise ValueError(f"{setup_py}: setup(...) has no url= argument.")


def colab_link(url: str, name: str = "") -> str:
    """Colab's address of colab/`name` in the repository at `url` (the folder if no name)."""
    return f"{COLAB_GITHUB}{url.removeprefix(GITHUB)}/blob/{BRANCH}/colab/{name}"


def with_repository(text: str, url: str) -> str:
    """`text` with every Colab badge link and `git+` install source pointing at `url`."""
    text = _BADGE_LINK.sub(colab_link(url), text)
    return _INSTALL_SOURCE.sub(f"git+{url}", text)


def set_repository(notebook, url: str) -> None:
    for cell in notebook.cells:
        cell.source = with_repository(cell.source, url)


def _kind(output) -> str:
    if output.output_type == "stream":
        return f"stream:{output.name}"
    if output.output_type in ("display_data", "execute_result"):
        return f"{output.output_type}:{'+'.join(sorted(output.get('data', {})))}"
    return output.output_type


def output_kinds(notebook) -> dict[int, list[str]]:
    """Per code cell (keyed by its index among all cells), the kinds of its outputs in order.

    A kind is the output type, with the stream name of a stream
    ("stream:stdout") or the sorted MIME types of a display_data or
    execute_result ("display_data:image/png+text/plain", a figure). Values are
    left out: scores and pixels may change from run to run, what a cell shows
    may not.
    """
    return {index: [_kind(output) for output in cell.outputs]
            for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"}


def _shown(kinds: list[str]) -> str:
    figures = sum("image/png" in kind for kind in kinds)
    return f"[{', '.join(kinds)}] ({figures} figures)"


def stale_cells(stored, fresh) -> list[str]:
    """One line per code cell whose fresh outputs differ in kind from the stored ones."""
    stored_kinds, fresh_kinds = output_kinds(stored), output_kinds(fresh)
    if stored_kinds.keys() != fresh_kinds.keys():
        return [f"code cells at {sorted(stored_kinds)} stored, at {sorted(fresh_kinds)} run"]
    return [f"cell {index}: stored {_shown(kinds)}, fresh run {_shown(fresh_kinds[index])}"
            for index, kinds in stored_kinds.items() if fresh_kinds[index] != kinds]


PARAMETERS_TAG = "parameters"  # papermill's name for the cell of a notebook's settings
INJECTED_TAG = "injected-parameters"


def parameters_cell(notebook) -> int:
    """Index of the one code cell tagged "parameters": the settings a run may override."""
    tagged = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              and PARAMETERS_TAG in cell.metadata.get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"expected one code cell tagged {PARAMETERS_TAG!r}, found {len(tagged)}")
    return tagged[0]


def with_parameters(notebook, overrides: dict):
    """A copy of `notebook` that runs with `overrides` (name -> value) for its settings.

    As papermill does, a cell assigning the new values is put right after the
    parameters cell (tagged "injected-parameters"). Each name must be assigned
    in the parameters cell itself, so that a renamed setting fails here instead
    of the run silently keeping its full-size value.
    """
    index = parameters_cell(notebook)
    assigned = {target.id for node in ast.parse(notebook.cells[index].source).body
                if isinstance(node, ast.Assign) for target in node.targets
                if isinstance(target, ast.Name)}
    unknown = sorted(set(overrides) - assigned)
    if unknown:
        raise ValueError(f"the parameters cell assigns no {', '.join(unknown)}")
    changed = copy.deepcopy(notebook)
    cell = nbformat.v4.new_code_cell(
        "".join(f"{name} = {value!r}\n" for name, value in overrides.items()))
    cell.metadata["tags"] = [INJECTED_TAG]
    changed.cells.insert(index + 1, cell)
    return changed


def without_injected(notebook):
    """`notebook` without the cell `with_parameters` added (for comparing with the stored one)."""
    changed = copy.deepcopy(notebook)
    changed.cells = [cell for cell in changed.cells
                     if INJECTED_TAG not in cell.metadata.get("tags", [])]
    return changed


def execute(notebook, workdir, kernel=None) -> None:
    """Runs `notebook` in place in a `python3` kernel whose working directory is `workdir`.

    Args:
        notebook: the nbformat notebook; its cells get the outputs.
        workdir: the directory the run writes into (figures, runs).
        kernel: None for a fresh kernel (what `store` uses), or the kernel
            manager of `shared_kernel()`: its namespace is cleared, Keras'
            session (layer-name counters) reset and its working directory moved
            to `workdir` first. Modules an earlier notebook imported stay
            imported there.

    Raises nbclient's CellExecutionError (naming the cell) if a cell fails, and
    RuntimeError if the run wrote anything into colab/.
    """
    before = {path.name for path in COLAB.iterdir()}
    if kernel is not None:
        reset = _RESET.format(workdir=str(workdir))
        _run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(reset)]), workdir,
             kernel)
    _run(notebook, workdir, kernel)
    added = sorted({path.name for path in COLAB.iterdir()} - before)
    if added:
        raise RuntimeError(f"the run wrote into colab/: {', '.join(added)}")


# What a fresh kernel would not have from an earlier notebook: its names,
# open figures, Keras' automatic layer names (dense_1, ...) and working directory.
_RESET = """\
%reset -f
import os as _os, sys as _sys
import matplotlib.pyplot as _plt
_plt.close("all")
if "keras" in _sys.modules:
    _sys.modules["keras"].backend.clear_session()
_os.chdir({workdir!r})
del _os, _sys, _plt
"""


def _client(notebook, workdir, kernel=None, **options):
    import nbclient  # noqa: PLC0415 - the test extra; only needed to execute

    return nbclient.NotebookClient(
        notebook, km=kernel, timeout=CELL_TIMEOUT, kernel_name="python3",
        extra_arguments=KERNEL_ARGUMENTS, record_timing=False, coalesce_streams=True,
        resources={"metadata": {"path": str(workdir)}}, **options)


def _run(notebook, workdir, kernel):
    """Runs `notebook` in a fresh kernel (kernel None) or in `kernel`, which stays up."""
    client = _client(notebook, workdir, kernel)
    try:
        client.execute(env={**os.environ, **KERNEL_ENV})
    finally:
        if kernel is not None and client.kc is not None:
            client.kc.stop_channels()


@contextlib.contextmanager
def shared_kernel(workdir):
    """One `python3` kernel, started in `workdir`, to run several notebooks in
    (`execute(..., kernel=...)`): one start-up and one TensorFlow import for all.

    Yields its kernel manager; shuts the kernel down on exit.
    """
    starter = _client(nbformat.v4.new_notebook(), workdir, shutdown_kernel="immediate")
    with starter.setup_kernel(env={**os.environ, **KERNEL_ENV}):
        yield starter.km


def _replace(path: pathlib.Path, text: str) -> None:
    """Writes through a temporary file and a rename: never a half-written file."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def store(name: str) -> None:
    path = COLAB / name
    notebook = nbformat.read(path, as_version=4)
    parameters_cell(notebook)  # the tests override its settings: it must be there
    metadata = copy.deepcopy(notebook.metadata)
    with tempfile.TemporaryDirectory(prefix="colab-run-") as workdir:
        execute(notebook, workdir)
    errors = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              and any(output.output_type == "error" for output in cell.outputs)]
    if errors:
        raise RuntimeError(f"{name}: error outputs in cells {errors}; not stored")
    # The kernel's language_info (Python version, lexer, ...) is machine noise.
    notebook.metadata = metadata
    nbformat.validate(notebook)
    _replace(path, nbformat.writes(notebook) + "\n")


def store_repository(names: list[str], url: str) -> None:
    for name in names:
        notebook = nbformat.read(COLAB / name, as_version=4)
        before = nbformat.writes(notebook)
        set_repository(notebook, url)
        if nbformat.writes(notebook) != before:
            _replace(COLAB / name, nbformat.writes(notebook) + "\n")
    readme = COLAB / "README.md"
    text = readme.read_text(encoding="utf-8")
    if with_repository(text, url) != text:
        _replace(readme, with_repository(text, url))


def main(argv=None) -> None:
    known = notebook_names()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"notebooks to run (default: all): {', '.join(known)}")
    parser.add_argument("--repository-only", action="store_true",
                        help="only rewrite the badges and install cells from setup.py's url=")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"NAME: no notebook {', '.join(unknown)} in colab/")
    try:
        url = repository_url()
    except ValueError as error:
        parser.error(str(error))
    names = args.names or known
    store_repository(known, url)  # every notebook, so the addresses never disagree
    if args.repository_only:
        print(f"addresses set to {url}")
        return
    failed = []
    for name in names:
        print(f"running {name} ...", flush=True)
        try:
            store(name)
        except Exception as error:  # the others still run; this one stays as it was
            print(f"{name}: not stored: {error}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        print(f"stored {name}: {(COLAB / name).stat().st_size / 1e3:.0f} kB", flush=True)
    if failed:
        return f"not stored (left as they were): {', '.join(failed)}"


if __name__ == "__main__":
    sys.exit(main())

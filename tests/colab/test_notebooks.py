"""The Colab tutorials in colab/: structure, stored outputs, addresses, and a full run.

The notebooks are stored with the outputs of a top-to-bottom run, written by
colab/store_outputs.py, so they can be read on GitHub and on the docs site
without running anything. `test_notebook_runs` executes each one (through the
script's own `execute`, in a temporary working directory) and fails when a
cell's outputs differ in kind from the stored ones: a cell that newly prints
or draws, stops drawing, or a notebook whose outputs were stripped. Values
(scores, pixels) may differ from run to run.

The seven share one `python3` kernel (`store.shared_kernel`), cleared between
notebooks (names, figures, Keras' layer-name counters, working directory):
a kernel start-up and a TensorFlow import cost ~7 s, a third of a notebook's
run. What a shared kernel cannot clear is the modules an earlier notebook
imported, so a notebook that uses a submodule it never imports could pass
here; the script stores outputs from a fresh kernel per notebook, where it
would fail.

The repository address lives in setup.py's `url=`; every badge and install
cell must agree with it. The install cell does nothing here, where tfp_bnn is
importable: the run never touches the network.
"""

import ast
import copy
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat")

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
COLAB = CHECKOUT / "colab"
NOTEBOOKS = (
    "quickstart.ipynb",
    "classification_calibration_ood.ipynb",
    "node_bnn_flows.ipynb",
    "bayesian_transformer_moments.ipynb",
    "porting_from_tfp_layers.ipynb",
    "uncertainty_for_your_model.ipynb",
    "coverage_and_calibration.ipynb",
)
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[^\s()]+")
MAX_NOTEBOOK_BYTES = 1_000_000  # a bigger notebook has a figure whose dpi should come down
# The test runs each notebook with its settings cut down (injected after its
# "parameters" cell, as papermill does): every cell still runs and draws what
# it draws, which is what the stale-output check compares, while the stored
# outputs come from the full-size run of colab/store_outputs.py. Full-size
# training is what the notebooks' numbers need, not what running every cell
# needs; this roughly halves the notebooks' share of the suite. The kinds of
# outputs the test compares do not depend on how well the models have
# trained, so one epoch (a few for the quickstart's and the porting guide's
# small regressions, whose epochs are a handful of steps) and a few Monte
# Carlo samples are enough; what is left of a run is mostly tracing, which
# does not shrink with the epochs.
CI_PARAMETERS = {
    "quickstart.ipynb": {"EPOCHS": 2, "NUM_SAMPLES": 10},
    "classification_calibration_ood.ipynb": {"EPOCHS": 1, "NUM_SAMPLES": 4},
    "node_bnn_flows.ipynb": {"EPOCHS": 1, "NUM_SAMPLES": 4},  # a multiple of K = 4
    "bayesian_transformer_moments.ipynb": {"EPOCHS": 1, "NUM_SAMPLES": 5},
    "porting_from_tfp_layers.ipynb": {"EPOCHS": 20, "LENET_EPOCHS": 1},
    "uncertainty_for_your_model.ipynb": {"EPOCHS": 1, "FINE_TUNE_EPOCHS": 1},
    "coverage_and_calibration.ipynb": {"EPOCHS": 1, "DIGITS_EPOCHS": 1, "NUM_SAMPLES": 4},
}


def _load_script():
    spec = importlib.util.spec_from_file_location("colab_store_outputs",
                                                  COLAB / "store_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


store = _load_script()
URL = store.repository_url()
# Written out here rather than taken from the script, so a wrong link in the
# script does not agree with itself.
COLAB_URL = ("https://colab.research.google.com/github/"
             + URL.removeprefix("https://github.com/") + "/blob/main/colab/")


def _read(name):
    return nbformat.read(COLAB / name, as_version=4)


def _code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _setup_extras():
    """The names of setup.py's extras_require, read without running it."""
    tree = ast.parse((CHECKOUT / "setup.py").read_text(encoding="utf-8"))
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
    extras = next(k.value for k in call.keywords if k.arg == "extras_require")
    return {key.value for key in extras.keys}  # the names; the values may be expressions


def test_every_notebook_is_listed_and_tested():
    assert sorted(path.name for path in COLAB.glob("*.ipynb")) == sorted(NOTEBOOKS)
    readme = (COLAB / "README.md").read_text(encoding="utf-8")
    for name in NOTEBOOKS:
        assert f"({COLAB_URL}{name})" in readme, f"colab/README.md has no badge for {name}"
    for link in COLAB_LINK.findall(readme):
        assert link.startswith(COLAB_URL), \
            f"colab/README.md links {link}, not setup.py's url; run " \
            "`python colab/store_outputs.py --repository-only`"


def test_setup_url_is_read_without_running_setup(tmp_path):
    assert URL.startswith("https://github.com/")
    setup_py = tmp_path / "setup.py"
    setup_py.write_text('raise SystemExit("never run")\nsetup(name="x", url="https://example.org/x")\n')
    with pytest.raises(ValueError, match="url= must be https://github.com/OWNER/NAME"):
        store.repository_url(setup_py)
    setup_py.write_text('setup(name="x")\n')
    with pytest.raises(ValueError, match="no url= argument"):
        store.repository_url(setup_py)
    setup_py.write_text('raise SystemExit("never run")\nsetup(url="https://github.com/a/b")\n')
    assert store.repository_url(setup_py) == "https://github.com/a/b"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_structure(name):
    notebook = _read(name)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    assert notebook.metadata["language_info"] == {"name": "python"}, \
        "the kernel's language_info (its Python version) is machine noise"
    assert (COLAB / name).stat().st_size < MAX_NOTEBOOK_BYTES

    title = notebook.cells[0]
    assert title.cell_type == "markdown"
    assert title.source.startswith("# ")
    assert BADGE_IMAGE in title.source
    assert f"({COLAB_URL}{name})" in title.source
    for cell in notebook.cells:
        for link in COLAB_LINK.findall(cell.source):
            assert link == COLAB_URL + name, f"{name} links {link}"

    # Outputs of one top-to-bottom run: counts 1, 2, ..., no errors, no timings.
    cells = _code_cells(notebook)
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), \
        f"{name} is not stored from a full run (counts {counts}); run " \
        f"`python colab/store_outputs.py {name}`"
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert "execution" not in cell.metadata, f"cell {index} of {name} keeps timings"
            kinds = [output.output_type for output in cell.outputs]
            assert "error" not in kinds, f"cell {index} of {name} stores an error"
    assert any(cell.outputs for cell in cells), f"{name} has no stored outputs"


def test_addresses_come_from_setup_url():
    """The stored notebooks are what the script makes of setup.py's url, and only that."""
    for name in NOTEBOOKS:
        notebook = _read(name)
        rewritten = copy.deepcopy(notebook)
        store.set_repository(rewritten, URL)
        assert rewritten == notebook, \
            f"{name}: addresses differ from setup.py's url; run " \
            "`python colab/store_outputs.py --repository-only`"
    moved = copy.deepcopy(_read("quickstart.ipynb"))
    store.set_repository(moved, "https://github.com/someone/fork")
    assert ("(https://colab.research.google.com/github/someone/fork/blob/main/colab/"
            "quickstart.ipynb)") in moved.cells[0].source
    assert "git+https://github.com/someone/fork\"" in _code_cells(moved)[0].source
    assert URL.removeprefix("https://github.com/") not in \
        moved.cells[0].source + _code_cells(moved)[0].source


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_first_code_cell_installs_only_when_missing(name):
    """Imports, then a single `if find_spec("tfp_bnn") is None:` that holds the pip call."""
    source = _code_cells(_read(name))[0].source
    statements = ast.parse(source).body
    guards = [node for node in statements if isinstance(node, ast.If)]
    assert len(guards) == 1, "expected one `if` guarding the install"
    assert all(isinstance(node, (ast.Import, ast.ImportFrom, ast.If)) for node in statements), \
        "the install cell must do nothing outside its guard"
    guard = guards[0]
    assert ast.unparse(guard.test) == "importlib.util.find_spec('tfp_bnn') is None"
    assert guard.orelse == []
    body = ast.unparse(guard)
    assert "pip" in body and f"git+{URL}" in body and "--editable" in body


def _run_install_cell(name, monkeypatch, workdir, importable, path):
    """Runs the install cell with pip replaced by a recorder, from sys.path = `path`.

    Returns the commands it would have run and sys.path after it.
    """
    commands = []
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda module, *args: (
        find_spec(module, *args) if importable or module != "tfp_bnn" else None))
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: commands.append(command))
    monkeypatch.setattr(sys, "path", list(path))
    monkeypatch.chdir(workdir)
    exec(_code_cells(_read(name))[0].source, {})  # the notebook's own cell
    return commands, list(sys.path)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_install_cell_picks_the_clone_or_github(name, monkeypatch, tmp_path):
    path_before = list(sys.path)
    assert _run_install_cell(name, monkeypatch, COLAB, True, path_before) == ([], path_before)

    # Run from colab/ in a clone without tfp_bnn installed: the clone, editable.
    (clone_command,), path = _run_install_cell(name, monkeypatch, COLAB, False, path_before)
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    assert clone_command[:-1] == pip + ["--editable"]
    assert clone_command[-1].startswith(f"{CHECKOUT}[")
    assert path[0] == str(CHECKOUT), "the running kernel must import the clone"

    # Anywhere else (Colab's /content): from GitHub at setup.py's url.
    (github_command,), path = _run_install_cell(name, monkeypatch, tmp_path, False, path_before)
    assert github_command[:-1] == pip
    extras = clone_command[-1].removeprefix(f"{CHECKOUT}")
    assert github_command[-1] == f"tfp-bnn{extras} @ git+{URL}"
    assert path == path_before
    assert set(extras.strip("[]").split(",")) <= _setup_extras(), extras


def _without_outputs(notebook, index):
    changed = copy.deepcopy(notebook)
    changed.cells[index].outputs = []
    return changed


def test_stale_outputs_are_reported():
    """No kernel: the stored quickstart against copies changed as a fresh run could be."""
    stored = _read("quickstart.ipynb")
    assert store.stale_cells(stored, copy.deepcopy(stored)) == []

    # Other numbers, same kinds: current.
    renumbered = copy.deepcopy(stored)
    for cell in _code_cells(renumbered):
        for output in cell.outputs:
            if output.output_type == "stream":
                output.text = re.sub(r"\d", "7", output.text)
    assert store.stale_cells(stored, renumbered) == []

    figure = next(index for index, cell in enumerate(stored.cells) if cell.cell_type == "code"
                  and [o.output_type for o in cell.outputs] == ["display_data"])
    (line,) = store.stale_cells(stored, _without_outputs(stored, figure))
    assert line.startswith(f"cell {figure}: ")
    assert "stored [display_data:image/png+text/plain] (1 figures)" in line
    assert "fresh run [] (0 figures)" in line

    # The other way round: the stored notebook was stripped, the run draws.
    stripped = copy.deepcopy(stored)
    for cell in _code_cells(stripped):
        cell.outputs = []
    lines = store.stale_cells(stripped, stored)
    assert len(lines) == sum(1 for cell in _code_cells(stored) if cell.outputs)

    warned = copy.deepcopy(stored)
    _code_cells(warned)[0].outputs.append(
        nbformat.v4.new_output("stream", name="stderr", text="UserWarning: ...\n"))
    (line,) = store.stale_cells(stored, warned)
    assert line.endswith("fresh run [stream:stderr] (0 figures)")

    as_html = copy.deepcopy(stored)
    data = as_html.cells[figure].outputs[0].data
    data["text/html"] = "<img>"
    del data["image/png"]
    (line,) = store.stale_cells(stored, as_html)
    assert "fresh run [display_data:text/html+text/plain] (0 figures)" in line


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """The kernel manager of one `python3` kernel the notebooks run in, in turn."""
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    with store.shared_kernel(tmp_path_factory.mktemp("kernel")) as manager:
        yield manager


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path, kernel):
    stored = _read(name)
    notebook = store.with_parameters(stored, CI_PARAMETERS[name])
    # Raises CellExecutionError naming a failing cell, and RuntimeError if
    # the run wrote into colab/ (figures and runs belong in tmp_path).
    store.execute(notebook, tmp_path, kernel=kernel)
    notebook = store.without_injected(notebook)

    errors = [output for cell in _code_cells(notebook) for output in cell.outputs
              if output.output_type == "error"]
    assert errors == []
    stale = store.stale_cells(stored, notebook)
    assert not stale, (
        f"{name}: the stored outputs differ in kind from a fresh run: {'; '.join(stale)}. "
        f"Run `python colab/store_outputs.py {name}` and commit the notebook.")


def test_run_settings_are_injected_after_the_parameters_cell():
    """No kernel: every notebook has one parameters cell that assigns what the test overrides."""
    assert sorted(CI_PARAMETERS) == sorted(NOTEBOOKS)
    for name in NOTEBOOKS:
        stored = _read(name)
        index = store.parameters_cell(stored)
        injected = store.with_parameters(stored, CI_PARAMETERS[name])
        cell = injected.cells[index + 1]
        namespace = {}
        exec(cell.source, namespace)  # noqa: S102 - the test's own literals
        assert {k: namespace[k] for k in CI_PARAMETERS[name]} == CI_PARAMETERS[name]
        # The stored notebook itself is untouched, and removing the cell gives it back.
        assert nbformat.writes(store.without_injected(injected)) == nbformat.writes(stored)
        assert len(injected.cells) == len(stored.cells) + 1

    stored = _read("quickstart.ipynb")
    with pytest.raises(ValueError, match="assigns no EPOCH$"):
        store.with_parameters(stored, {"EPOCH": 1})  # a misspelt setting is not ignored
    untagged = copy.deepcopy(stored)
    untagged.cells[store.parameters_cell(stored)].metadata["tags"] = []
    with pytest.raises(ValueError, match="one code cell tagged 'parameters', found 0"):
        store.parameters_cell(untagged)

"""The Colab tutorials in colab/: their structure, and that they run top to bottom.

Each notebook is executed in a fresh `python3` kernel (ipykernel from the
test environment) with a temporary working directory, so the figures and run
directories it writes land there. The first code cell installs tfp_bnn only
when it is not importable, which it is here: the run never touches the
network.
"""

import ast
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")

COLAB = pathlib.Path(__file__).resolve().parents[2] / "colab"
NOTEBOOKS = (
    "quickstart.ipynb",
    "classification_calibration_ood.ipynb",
    "node_bnn_flows.ipynb",
    "bayesian_transformer_moments.ipynb",
    "porting_from_tfp_layers.ipynb",
    "uncertainty_for_your_model.ipynb",
)
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_URL = "https://colab.research.google.com/github/tfp-bnn/tfp_bnn/blob/main/colab/"
REPOSITORY = "git+https://github.com/tfp-bnn/tfp_bnn"
CELL_TIMEOUT = 600  # seconds; each notebook takes about a minute on two CPU cores


def _read(name):
    return nbformat.read(COLAB / name, as_version=4)


def _code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def test_every_notebook_is_listed_and_tested():
    assert sorted(path.name for path in COLAB.glob("*.ipynb")) == sorted(NOTEBOOKS)
    readme = (COLAB / "README.md").read_text(encoding="utf-8")
    for name in NOTEBOOKS:
        assert COLAB_URL + name in readme, f"colab/README.md has no badge for {name}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_structure(name):
    notebook = _read(name)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"

    title = notebook.cells[0]
    assert title.cell_type == "markdown"
    assert title.source.startswith("# ")
    assert BADGE_IMAGE in title.source
    assert f"({COLAB_URL}{name})" in title.source

    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {index} of {name} has stored outputs"
            assert cell.execution_count is None, f"cell {index} of {name} has a count"


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
    assert "pip" in body and REPOSITORY in body


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # The kernel inherits this environment: a non-GUI matplotlib backend, and
    # TensorFlow's C++ start-up chatter off.
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    notebook = _read(name)
    before = sorted(path.name for path in COLAB.iterdir())
    client = nbclient.NotebookClient(
        notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell

    errors = [output for cell in _code_cells(notebook) for output in cell.outputs
              if output.output_type == "error"]
    assert errors == []
    # Figures and run directories go to the working directory, never into colab/.
    assert sorted(path.name for path in COLAB.iterdir()) == before

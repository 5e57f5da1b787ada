"""The public text speaks of the project alone: no internal references.

What a user reads must stand on its own: it cites papers and names things by
what they are, never the planning that produced them. Checked here:

- every .py file under tfp_bnn/, zoo/ and benchmarks/, in full: docstrings
  become the API pages, and comments and string literals are read in the
  published source, printed in messages or shown in help, so no part of a
  file is exempt; the .md files beside them (the packaged datasets' notes,
  benchmarks/README.md) and the published results, benchmarks/results/*.json;
- colab/*.ipynb: the source of every cell, and the text of the stored outputs
  (images are skipped), which the site renders;
- README.md, BENCHMARKS.md, CHANGELOG.md, setup.py, pyproject.toml (those that
  exist) and the documentation site's own files in .ci/docs;
- what `python -m zoo` prints: the help of the main job and of every command,
  and `python -m zoo list`, produced in-process through `zoo.cli.main`.

Flagged (`PATTERNS`): references to issues or tickets of this project
("issue 17", "issue #3", "the issue's"; a numbered issue of another project,
"TFP issues #1795", is a citation and allowed), design documents by number
("seed 000", "seeds/", "the seed's", "deviation from the seed"), the
`shared/` folder and `../shared` paths, machine paths (/work/, /root/,
/home/<user>, /Users/<user>, /tmp/<name>; `/tmp/.keras`, where Keras itself
falls back, is a fact about Keras and allowed), and internal documents
(STYLE.md, the product card, the preamble). Tests are not public text and may
keep such references, this file included.

Every pattern is shown to flag a synthetic bad line (`test_each_pattern_flags`),
and the allowed forms to pass (`test_allowed_forms_pass`).
"""

import json
import re
from pathlib import Path

import pytest

from zoo import cli
from zoo.experiments import main_job
from zoo.experiments import uci_benchmark_args

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tfp_bnn", "zoo", "benchmarks")
TOP_FILES = ("README.md", "BENCHMARKS.md", "CHANGELOG.md", "setup.py", "pyproject.toml")
SITE = ROOT / ".ci" / "docs"
SITE_SUFFIXES = (".md", ".py", ".yml", ".yaml", ".html", ".css", ".js")

# Another project's issue tracker, named just before "issue(s) #N": a citation.
_EXTERNAL_PROJECT = re.compile(
    r"(TFP|TensorFlow( Probability)?|tensorflow/probability|Keras|keras-team/keras|tf_keras"
    r"|keras-hub|JAX|NumPy|griffe|mkdocs|MkDocs)('s)?\s+$")

# name -> (pattern, synthetic line it must flag). Case-insensitive.
PATTERNS = {
    "numbered issue": (r"\b(issues?|tickets?)\s*#?\s*\d+", "Since issue 17 the cluster is"),
    "issue by hash": (r"\bissue\s*#", "fixed in issue #"),
    "the issue's": (r"\bthe (issue|ticket)'s\b", "The issue's bar is RMSE <= 6.5."),
    "design doc by number": (r"\bseeds?\s*0\d\d\b", "follows seed 004, eq. 67"),
    "design doc folder": (r"\bseeds/", "see shared/seeds/000.txt"),
    "the design doc": (r"\bthe seed's\b", "the seed's first-order rule"),
    "deviation from the design doc": (
        r"\b(deviations?|slips?|departures?) (from|of) the seed\b",
        "Deviations from the seed are listed below"),
    "what the design doc does": (
        r"\bthe seed (does|drops|keeps|treats|states|uses|writes|fixes)\b",
        "as the seed does"),
    "shared folder": (r"(?<![\w.-])(\.\./)?shared/(data|seeds)\b|\.\./shared\b",
                      "--dataset ../shared/data/uci/yacht"),
    "machine path /work": (r"(?<![\w.~-])/work/", "measured in /work/main/runs"),
    "machine path /root": (r"(?<![\w.~-])/root/", "cached in /root/.cache/x"),
    "machine home": (r"(?<![\w.~-])/(home|Users)/[A-Za-z_][\w.-]*",
                     "under /home/alice/data"),
    "machine temp path": (r"(?<![\w.~-])/tmp/(?!\.keras\b)[\w.-]+", "log in /tmp/bash_jobs"),
    "internal document": (r"\bSTYLE\.md\b|\bproduct card\b|\bPREAMBLE\b",
                          "as STYLE.md says"),
}
_COMPILED = {name: re.compile(pattern, re.IGNORECASE)
             for name, (pattern, _) in PATTERNS.items()}
# All patterns at once: most lines match none, and one search rules them out.
_ANY = re.compile("|".join(f"(?:{pattern})" for pattern, _ in PATTERNS.values()),
                  re.IGNORECASE)

# Lines the checker must let through: citations and ordinary uses of "seed".
ALLOWED = (
    "Keras 3 dropped them (TFP issues #1795, #1829, #2006).",
    "See TensorFlow Probability issue 1795.",
    "`/tmp/.keras` when the home directory is not writable",
    "every seed's rows as JSON; seed 0 draws the split",
    "the issue of calibration is that",
    "data/uci/yacht, a directory in the UCI layout",
)


def find_internal_references(text):
    """(line number, pattern name, matched text) for every internal reference in `text`."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not _ANY.search(line):
            continue
        for name, pattern in _COMPILED.items():
            for match in pattern.finditer(line):
                if name == "numbered issue" and _EXTERNAL_PROJECT.search(line[:match.start()]):
                    continue
                hits.append((number, name, match.group(0)))
    return hits


def _notebook_text(path):
    """Cell sources and text outputs of a notebook, one block per cell, with a header line."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    blocks = []
    for index, cell in enumerate(notebook.get("cells", [])):
        parts = ["".join(cell.get("source", []))]
        for output in cell.get("outputs", []):
            if "text" in output:
                parts.append("".join(output["text"]))
            for kind, value in output.get("data", {}).items():
                if kind.startswith("text/"):
                    parts.append("".join(value) if isinstance(value, list) else value)
        blocks.append((f"cell {index}", "\n".join(parts)))
    return blocks


def _json_strings(value):
    """The distinct keys and string values of a JSON document, sorted."""
    found, stack = set(), [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.update(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.add(item)
    return sorted(found)


def _public_sources():
    """(label, text) for every public text file; a notebook gives one entry per cell."""
    files = []
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py")) + sorted((ROOT / package).rglob("*.md"))
    files += [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    files += sorted(p for p in SITE.rglob("*") if p.is_file() and p.suffix in SITE_SUFFIXES)
    sources = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in files]
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        # Mostly numbers: only the keys and strings can hold a reference.
        label = f"{result.relative_to(ROOT)} string"
        sources.append((label, "\n".join(_json_strings(json.loads(result.read_text())))))
    for notebook in sorted((ROOT / "colab").glob("*.ipynb")):
        label = str(notebook.relative_to(ROOT))
        sources += [(f"{label} {cell}", text) for cell, text in _notebook_text(notebook)]
    for markdown in sorted((ROOT / "colab").glob("*.md")):
        sources.append((str(markdown.relative_to(ROOT)), markdown.read_text(encoding="utf-8")))
    return sources


def _help_of(argv, capsys):
    """What `python -m zoo ARGV` prints for --help (argparse exits 0 after printing)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _report(hits):
    return "\n".join(f"{where}:{line}: {name}: {text!r}" for where, line, name, text in hits)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_each_pattern_flags(name):
    """Each pattern can fail: its synthetic bad line is flagged, under its own name."""
    bad_line = PATTERNS[name][1]
    assert name in [found for _, found, _ in find_internal_references("ok\n" + bad_line)]
    assert find_internal_references("ok\n" + bad_line)[0][0] == 2  # the line number


@pytest.mark.parametrize("line", ALLOWED)
def test_allowed_forms_pass(line):
    assert find_internal_references(line) == []


def test_public_files_have_no_internal_references():
    sources = _public_sources()
    labels = {label.split(" cell ")[0].split(" string")[0] for label, _ in sources}
    # The scan reaches what it claims to (an empty glob would pass silently).
    for expected in ("tfp_bnn/__init__.py", "zoo/cli.py", "benchmarks/README.md",
                     "benchmarks/results/uci_yacht_auto.json", "README.md", "BENCHMARKS.md",
                     "setup.py", ".ci/docs/mkdocs.yml", "colab/quickstart.ipynb",
                     "colab/README.md"):
        assert expected in labels, expected
    hits = [(label, line, name, text) for label, source in sources
            for line, name, text in find_internal_references(source)]
    assert not hits, "internal references in public text:\n" + _report(hits)


def test_cli_output_has_no_internal_references(capsys):
    """The help of `python -m zoo` and each command, and `python -m zoo list`."""
    outputs = {"python -m zoo --help": _help_of(["--help"], capsys),
               "python -m zoo (main job) --help": main_job.build_parser().format_help(),
               "python -m zoo benchmark --help":
                   uci_benchmark_args.build_parser().format_help()}
    for command in cli.COMMANDS:
        if command != "benchmark":  # its help is the benchmark parser's, above
            outputs[f"python -m zoo {command} --help"] = _help_of([command, "--help"], capsys)
    assert cli.main(["list"]) == 0
    outputs["python -m zoo list"] = capsys.readouterr().out
    assert "bbb_mlp" in outputs["python -m zoo list"]
    assert "--dataset" in outputs["python -m zoo benchmark --help"]
    hits = [(label, line, name, text) for label, output in outputs.items()
            for line, name, text in find_internal_references(output)]
    assert not hits, "internal references in CLI output:\n" + _report(hits)

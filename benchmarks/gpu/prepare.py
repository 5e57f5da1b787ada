"""Fills benchmarks/gpu/wheels/ with what `run.py` installs on a machine without network.

    python benchmarks/gpu/prepare.py            # here, where PyPI is reachable through pip
    python benchmarks/gpu/prepare.py --check    # only the size and contents of the folder

The GPU machine is assumed to have a Python with JAX and its CUDA libraries
already installed, no TensorFlow and no network. What it lacks is downloaded
here as wheels, at the versions this repository's JAX suite runs with:
Keras, TensorFlow Probability (its JAX substrate is pure Python) and their
small dependencies, plus a wheel of tfp_bnn itself (which also carries
`zoo`). The few with compiled code are downloaded as manylinux x86_64
wheels for CPython 3.11 and 3.12, as the GPU machine's Python version is
not known in advance. NumPy, jax, jaxlib and ml_dtypes' own runtime come
with the machine's JAX and are not downloaded.

After downloading, the folder is installed offline (`--no-index
--find-links`) into a throwaway virtual environment that sees this
interpreter's packages, as `run.py` does there, and its size is printed and
checked against `--limit-mib`.
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WHEELS = HERE / "wheels"
LIMIT_MIB = 60

# The versions the JAX suite runs with (py3-none-any wheels).
PURE = ("keras==3.15.1", "tensorflow-probability==0.25.0", "absl-py==2.5.1",
        "cloudpickle==3.1.3", "decorator==5.3.1", "gast==0.7.0", "namex==0.1.0",
        "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2", "pygments==2.21.0",
        "packaging==26.4", "six==1.17.0", "attrs==26.1.0", "typing-extensions==4.16.0",
        # run.py's fallback where the machine's jax is 0.7 or newer (run.TFP_NIGHTLY).
        "tfp-nightly==0.26.0.dev20261027")
# Compiled: one wheel per CPython version (ml_dtypes too: the machine's jax brings one,
# but Keras names it, and a jax without it would otherwise fail to resolve offline).
BINARY = ("h5py==3.14.0", "ml-dtypes==0.6.0", "optree==0.20.0", "dm-tree==0.1.10",
          "wrapt==2.5.2")
PYTHONS = ("3.11", "3.12")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def folder_mib(folder) -> float:
    """Total size of the files directly in `folder`, in MiB (0 if it does not exist)."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        return 0.0
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 2**20


def size_line(folder, limit_mib: float) -> tuple:
    """(ok, one printable line) for the folder's size against `limit_mib`."""
    size = folder_mib(folder)
    ok = 0 < size <= limit_mib
    verdict = "ok" if ok else ("empty" if size == 0 else "OVER the limit")
    return ok, f"wheel folder {folder}: {size:.1f} MiB (limit {limit_mib} MiB): {verdict}"


def tfp_bnn_wheel(folder):
    """The tfp_bnn wheel in `folder` (the newest by name), or None."""
    found = sorted(pathlib.Path(folder).glob("tfp_bnn-*.whl"))
    return found[-1] if found else None


def _pip(*args):
    print("+ pip " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def download(folder):
    folder.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", "-q", "-d", str(folder), *PURE)
    for version in PYTHONS:
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        _pip("download", "--no-deps", "-q", "-d", str(folder), "--only-binary=:all:",
             "--python-version", version, "--implementation", "cp", *platforms, *BINARY)
    for old in folder.glob("tfp_bnn-*.whl"):
        old.unlink()
    _pip("wheel", "--no-deps", "-q", "-w", str(folder), str(ROOT))


def check_offline_install(folder):
    """Installs the folder offline into a throwaway venv seeing this interpreter's packages.

    This interpreter stands in for the GPU machine's Python (its NumPy and
    jax); Keras, TFP and tfp_bnn must come from the folder alone.
    """
    sys.path.insert(0, str(HERE))
    import run  # noqa: PLC0415 - the same installer run.py uses there

    with tempfile.TemporaryDirectory(prefix="tfp_bnn_wheels_check_") as tmp:
        python = run.make_venv(pathlib.Path(tmp) / "venv", folder)
        code = ("import os; os.environ['KERAS_BACKEND'] = 'jax'; import keras, "
                "tensorflow_probability.substrates.jax as t; import importlib.metadata as m; "
                "print('offline install ok: keras', keras.__version__, 'tfp', "
                "m.version('tensorflow-probability'), 'tfp-bnn', m.version('tfp-bnn'), "
                "'backend', keras.backend.backend())")
        subprocess.run([str(python), "-c", code], check=True, cwd=tmp)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=pathlib.Path, default=WHEELS, help="wheel folder")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    parser.add_argument("--check", action="store_true",
                        help="no download: check the folder's size and offline install")
    parser.add_argument("--no-install-check", action="store_true",
                        help="skip the throwaway-venv offline install")
    args = parser.parse_args(argv)
    if not args.check:
        download(args.dir)
    if tfp_bnn_wheel(args.dir) is None:
        print(f"no tfp_bnn wheel in {args.dir}")
        return 1
    if not args.no_install_check:
        check_offline_install(args.dir)
    for path in sorted(args.dir.iterdir()):
        print(f"  {path.stat().st_size / 2**20:6.2f} MiB  {path.name}")
    ok, line = size_line(args.dir, args.limit_mib)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

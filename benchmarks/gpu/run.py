"""tfp_bnn on Keras' JAX backend on an NVIDIA GPU: train step, Monte Carlo predict, main job.

    python benchmarks/gpu/run.py                 # on the GPU machine, under 8 minutes
    python benchmarks/gpu/run.py --cpu           # the same path on CPU JAX (JAX_PLATFORMS=cpu)
    python benchmarks/gpu/run.py --cpu --steps 2 --repeats 1 --no-main-job   # a smoke run

Run with the Python whose jax and jaxlib (with CUDA) are installed. It
needs no network and no TensorFlow: Keras, TensorFlow Probability and
tfp_bnn come from the wheels `prepare.py` put in benchmarks/gpu/wheels/,
installed offline into a fresh virtual environment that sees this
interpreter's packages (so the machine's jax, jaxlib and CUDA libraries are
the ones used). `--no-install` skips that and runs this interpreter as it is
(keras, TFP and tfp_bnn importable already).

Then, with KERAS_BACKEND=jax (see `_worker.py`): the 784-400-400-10 MLP of
`tfp_bnn.layers.DenseFlipout` and of `keras.layers.Dense` trained side by
side on synthetic MNIST-shaped data (batch 128, fixed seed), the median
train step of each and their ratio; T Monte Carlo predictions
(`tfp_bnn.predict.sample`) against the Dense forward pass run T times; and
the main job (`python -m zoo`: Bayes by Backprop on concrete), its scores.
What does not run on JAX yet is reported in one line and skipped.

TFP 0.25's JAX substrate needs jax < 0.7. With a newer jax the script says
so in one line at start and, if the wheel folder holds the tfp-nightly
fallback, installs it in place of TFP 0.25; otherwise it stops there.
"""

import argparse
import importlib.metadata
import os
import pathlib
import re
import site
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WHEELS = HERE / "wheels"
# TFP 0.25's JAX substrate imports private JAX modules that jax 0.7 removed.
JAX_BELOW = (0, 7)
JAX_TESTED = "0.6.2"
# What is installed from the wheel folder by name; tfp_bnn's own wheel goes in without
# dependencies (its metadata asks for TensorFlow, which the JAX backend does not use).
KERAS = "keras==3.15.1"
TFP = "tensorflow-probability==0.25.0"
# The fallback for jax >= 0.7: a TFP nightly whose JAX substrate imported and computed
# (Normal, KL, Independent sampling) with jax 0.6.2 and with jax 0.10.2.
TFP_NIGHTLY = "tfp-nightly==0.26.0.dev20261027"
# Sizes per platform where the flag is not given: (steps, repeats, warm-up steps,
# Monte Carlo samples, predict inputs, main-job epochs, main-job samples).
DEFAULTS = {"gpu": (50, 5, 5, 100, 10000, 600, 100),
            "cpu": (20, 3, 3, 20, 1000, 20, 20)}
SIZES = ("steps", "repeats", "warmup_steps", "samples", "predict_inputs",
         "main_job_epochs", "main_job_samples")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true",
                        help="run on CPU JAX (JAX_PLATFORMS=cpu), smaller default sizes")
    parser.add_argument("--steps", type=int, help="timed train steps per fit call "
                        "(default 50 on GPU, 20 with --cpu)")
    parser.add_argument("--repeats", type=int, help="interleaved rounds (default 5 / 3)")
    parser.add_argument("--warmup-steps", type=int, help="steps of the warm-up fit "
                        "(default 5 / 3)")
    parser.add_argument("--samples", type=int, help="Monte Carlo samples T (default 100 / 20)")
    parser.add_argument("--predict-inputs", type=int,
                        help="inputs of the predict throughput (default 10000 / 1000)")
    parser.add_argument("--main-job-epochs", type=int, help="epochs of `python -m zoo` "
                        "(default 600, its own default / 20)")
    parser.add_argument("--main-job-samples", type=int,
                        help="Monte Carlo samples of the main job (default 100 / 20)")
    parser.add_argument("--no-main-job", action="store_true", help="skip `python -m zoo`")
    parser.add_argument("--main-job-timeout", type=int, default=240,
                        help="seconds before the main job is stopped (default 240)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wheels", type=pathlib.Path, default=WHEELS,
                        help="the folder prepare.py filled")
    parser.add_argument("--venv", type=pathlib.Path, default=None,
                        help="where to create the virtual environment (default: a "
                             "temporary folder, removed afterwards)")
    parser.add_argument("--no-install", action="store_true",
                        help="use this interpreter as it is, with this checkout's tfp_bnn")
    args = parser.parse_args(argv)
    defaults = DEFAULTS["cpu" if args.cpu else "gpu"]
    for name, default in zip(SIZES, defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    for name in SIZES + ("batch_size", "main_job_timeout"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each fit call is not timed)")
    if args.venv is not None and args.no_install:
        parser.error("--venv and --no-install exclude each other")
    if not args.no_install and not any(args.wheels.glob("tfp_bnn-*.whl")):
        parser.error(f"no tfp_bnn wheel in {args.wheels}: run benchmarks/gpu/prepare.py "
                     "first (where pip reaches PyPI), or pass --no-install")
    return args


def version_tuple(text: str) -> tuple:
    """(major, minor, patch) of a version string, numeric parts only: '0.6.2' -> (0, 6, 2)."""
    parts = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d*", piece).group()
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:  # "10rc1": a pre-release suffix ends the numeric part
            break
    return tuple(parts)


def nightly_wheel(folder):
    """The fallback TFP nightly wheel in `folder`, or None."""
    version = TFP_NIGHTLY.split("==")[1]
    found = sorted(pathlib.Path(folder).glob(f"tfp_nightly-{version}-*.whl"))
    return found[-1] if found else None


def jax_problem(nightly=None):
    """(one line, fatal) on this interpreter's jax and TFP 0.25's substrate; (None, False) if fine.

    With jax >= 0.7 the line is fatal unless `nightly` (the fallback wheel)
    is given, which is then installed in place of TFP 0.25. Read from the
    installed metadata: importing jax here would claim the GPU's memory in
    this process before the benchmark's own starts.
    """
    try:
        version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return (f"jax is not installed for {sys.executable}: run this script with the Python "
                f"that has jax and jaxlib (jax[cuda12]=={JAX_TESTED} on an NVIDIA GPU)"), True
    if version_tuple(version) < JAX_BELOW:
        return None, False
    line = (f"jax {version} is installed, but TensorFlow Probability 0.25's JAX substrate "
            f"needs jax < {'.'.join(map(str, JAX_BELOW))} ({JAX_TESTED} tested)")
    if nightly is not None:
        return f"{line}: installing {nightly.name} in its place", False
    return (f"{line}: install jax[cuda12]=={JAX_TESTED} (jaxlib {JAX_TESTED}), or run "
            "prepare.py for the tfp-nightly fallback (not with --no-install)"), True


def outer_site_dirs() -> list:
    """This interpreter's site-packages folders (its venv's or conda env's own, user site)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def make_venv(path, wheels, tfp=TFP) -> pathlib.Path:
    """A virtual environment at `path` with the folder's wheels, installed offline.

    `--system-site-packages` alone would show the venv the base interpreter's
    packages, not those of a venv or conda env this script runs in; a .pth
    file adds this interpreter's site-packages after the venv's own, so pip
    and Python there see the installed jax, jaxlib and NumPy.

    Returns:
        the venv's python.
    """
    path = pathlib.Path(path)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)],
                   check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    pathlib.Path(purelib, "_outer_site.pth").write_text("\n".join(outer_site_dirs()) + "\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-index", "--find-links", str(wheels)]
    subprocess.run(pip + [KERAS, tfp], check=True)
    wheel = sorted(pathlib.Path(wheels).glob("tfp_bnn-*.whl"))[-1]
    subprocess.run(pip + ["--no-deps", str(wheel)], check=True)
    return python


def child_env(args) -> dict:
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    if args.cpu:
        env["JAX_PLATFORMS"] = "cpu"
    if args.no_install:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def error_line(stderr: str) -> str:
    """The last `SomeError: message` line of a traceback (else its last line), shortened."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    found = errors[-1] if errors else (lines[-1] if lines else "no message")
    return found[:240]


def run_main_job(python, args, env, cwd) -> int:
    """`python -m zoo --epochs E --samples S --seed SEED` in the benchmark's environment."""
    command = [str(python), "-m", "zoo", "--epochs", str(args.main_job_epochs),
               "--samples", str(args.main_job_samples), "--seed", str(args.seed)]
    print(f"\n== main job: {' '.join(command[1:])} (KERAS_BACKEND=jax) ==", flush=True)
    try:
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=args.main_job_timeout)
    except subprocess.TimeoutExpired:
        print(f"main job: stopped after {args.main_job_timeout} s (--main-job-timeout)")
        return 1
    lines = done.stdout.splitlines()
    for line in lines if done.returncode == 0 else lines[-5:]:
        print(line)
    if done.returncode != 0:
        print(f"main job does not run on JAX here (exit {done.returncode}): "
              f"{error_line(done.stderr)}")
    return done.returncode


def main(argv=None):
    args = parse_args(argv)
    problem, fatal = jax_problem(None if args.no_install else nightly_wheel(args.wheels))
    if problem:
        print(problem, flush=True)
        if fatal:
            return 2
    tfp = TFP if problem is None else TFP_NIGHTLY
    with tempfile.TemporaryDirectory(prefix="tfp_bnn_gpu_bench_") as tmp:
        if args.no_install:
            python = pathlib.Path(sys.executable)
        else:
            where = args.venv or pathlib.Path(tmp) / "venv"
            print(f"installing {args.wheels} offline into {where} ...", flush=True)
            try:
                python = make_venv(where, args.wheels, tfp)
            except subprocess.CalledProcessError as error:
                # e.g. a system Python without ensurepip (Debian's python3-venv not installed)
                print(f"the offline install failed ({' '.join(map(str, error.cmd[:4]))} ...: "
                      f"exit {error.returncode}); its output is above")
                return 1
        env = child_env(args)
        worker = [str(python), str(HERE / "_worker.py")] + [
            f"--{name.replace('_', '-')}={getattr(args, name)}"
            for name in ("steps", "repeats", "warmup_steps", "samples", "predict_inputs",
                         "batch_size", "seed")]
        # From a folder outside the checkout: tfp_bnn and zoo come from the installed wheel
        # (or, with --no-install, from PYTHONPATH).
        code = subprocess.run(worker, env=env, cwd=tmp).returncode
        if code != 0:
            print(f"benchmark worker failed (exit {code})")
            return code
        if not args.no_main_job:
            run_main_job(python, args, env, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

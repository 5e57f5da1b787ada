"""benchmarks/gpu/: what runs without a GPU and without the prepared wheels.

run.py's argument checks and its jax version gate, prepare.py's size check,
and a tiny `run.py --cpu --no-install` in a subprocess (KERAS_BACKEND=jax,
CPU JAX, this interpreter's packages). No timing is asserted. The rows that
need tfp_bnn on JAX (DenseFlipout, the main job) are skipped, with a reason
that names them, for as long as they print that they do not run on JAX yet.
"""

import importlib.metadata
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

GPU = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_gpu_bench_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_py():
    return _load("run")


@pytest.fixture(scope="module")
def prepare_py():
    return _load("prepare")


@pytest.mark.jax
@pytest.mark.parametrize("argv, message", [
    (["--cpu", "--no-install", "--steps", "1"], "--steps must be >= 2"),
    (["--cpu", "--no-install", "--repeats", "0"], "--repeats must be >= 1"),
    (["--no-install", "--predict-inputs", "-3"], "--predict-inputs must be >= 1"),
    (["--no-install", "--venv", "somewhere"], "--venv and --no-install exclude each other"),
])
def test_bad_arguments_end_with_one_line(run_py, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_py.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.jax
def test_missing_wheels_name_prepare(run_py, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_py.parse_args(["--wheels", str(tmp_path)])
    assert "prepare.py" in capsys.readouterr().err


@pytest.mark.jax
def test_sizes_default_per_platform_and_flags_win(run_py):
    gpu = run_py.parse_args(["--no-install"])
    cpu = run_py.parse_args(["--no-install", "--cpu", "--steps", "7"])
    assert (gpu.steps, gpu.samples, gpu.predict_inputs, gpu.main_job_epochs) == (50, 100,
                                                                                 10000, 600)
    assert (cpu.steps, cpu.samples, cpu.predict_inputs) == (7, 20, 1000)


@pytest.mark.jax
@pytest.mark.parametrize("text, parsed", [("0.6.2", (0, 6, 2)), ("0.7.0", (0, 7, 0)),
                                          ("0.6.1.dev20250101", (0, 6, 1)),
                                          ("0.10rc1", (0, 10))])
def test_version_tuple(run_py, text, parsed):
    assert run_py.version_tuple(text) == parsed


@pytest.mark.jax
@pytest.mark.parametrize("installed, nightly, fatal, expected", [
    ("0.6.2", None, False, None), ("0.6.0", "fallback.whl", False, None),
    ("0.7.0", None, True, "needs jax < 0.7"), ("0.10.1", None, True, "tfp-nightly fallback"),
    ("0.10.1", "fallback.whl", False, "installing fallback.whl in its place"),
    (None, "fallback.whl", True, "jax is not installed")])
def test_jax_gate_reads_the_installed_version(run_py, monkeypatch, installed, nightly, fatal,
                                              expected):
    def version(name):
        assert name == "jax"
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(run_py.importlib.metadata, "version", version)
    problem, is_fatal = run_py.jax_problem(nightly and pathlib.Path(nightly))
    assert is_fatal == fatal
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and "\n" not in problem


@pytest.mark.jax
def test_nightly_wheel_is_the_pinned_one(run_py, tmp_path):
    assert run_py.nightly_wheel(tmp_path) is None
    (tmp_path / "tfp_nightly-0.26.0.dev20260101-py2.py3-none-any.whl").write_bytes(b"")
    assert run_py.nightly_wheel(tmp_path) is None
    pinned = run_py.TFP_NIGHTLY.split("==")[1]
    (tmp_path / f"tfp_nightly-{pinned}-py2.py3-none-any.whl").write_bytes(b"")
    assert run_py.nightly_wheel(tmp_path).name.startswith(f"tfp_nightly-{pinned}-")


@pytest.mark.jax
def test_error_line_is_the_exception_of_a_traceback(run_py):
    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "ModuleNotFoundError: No module named 'tensorflow'\n  extra context\n")
    assert run_py.error_line(stderr) == "ModuleNotFoundError: No module named 'tensorflow'"
    assert run_py.error_line("just a line\n") == "just a line"
    assert run_py.error_line("") == "no message"


@pytest.mark.jax
def test_wheel_folder_size_check(prepare_py, tmp_path):
    assert prepare_py.size_line(tmp_path / "absent", 60) == (
        False, f"wheel folder {tmp_path / 'absent'}: 0.0 MiB (limit 60 MiB): empty")
    (tmp_path / "a.whl").write_bytes(b"\0" * 2**20)
    (tmp_path / "b.whl").write_bytes(b"\0" * 2**19)
    assert prepare_py.folder_mib(tmp_path) == 1.5
    ok, line = prepare_py.size_line(tmp_path, 2)
    assert ok and line.endswith("1.5 MiB (limit 2 MiB): ok")
    ok, line = prepare_py.size_line(tmp_path, 1)
    assert not ok and "OVER the limit" in line
    assert prepare_py.tfp_bnn_wheel(tmp_path) is None
    (tmp_path / "tfp_bnn-0.1.0-py3-none-any.whl").write_bytes(b"")
    assert prepare_py.tfp_bnn_wheel(tmp_path).name == "tfp_bnn-0.1.0-py3-none-any.whl"


@pytest.fixture(scope="module")
def cpu_run():
    """stdout of a tiny `run.py --cpu --no-install` with this interpreter's jax."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed: the CPU JAX run needs it")
    done = subprocess.run(
        [sys.executable, str(GPU / "run.py"), "--cpu", "--no-install", "--steps", "2",
         "--repeats", "1", "--warmup-steps", "1", "--samples", "2", "--predict-inputs", "64",
         "--main-job-epochs", "1", "--main-job-samples", "2", "--main-job-timeout", "600"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_cpu_run_times_dense_on_jax(cpu_run):
    assert re.search(r"keras [\d.]+ \(backend jax\)", cpu_run), cpu_run
    assert re.search(r"^device: cpu", cpu_run, re.MULTILINE), cpu_run
    for row in ("keras.layers.Dense [JAX]", "keras Dense forward x 2 (jit)"):
        # A median in ms, not "n/a (error)": the variant compiled and ran.
        assert re.search(rf"^  {re.escape(row)} +\d+\.\d+ ", cpu_run, re.MULTILINE), \
            f"missing or failed row {row!r}:\n{cpu_run}"


@pytest.mark.slow
def test_cpu_run_times_flipout_on_jax(cpu_run):
    if "DenseFlipout does not train on JAX yet" in cpu_run or "tfp_bnn does not import" \
            in cpu_run:
        pytest.skip("tfp_bnn.layers.DenseFlipout does not run on Keras' JAX backend yet")
    match = re.search(r"ratio tfp_bnn Flipout / keras Dense \[JAX train step\]: (\S+)", cpu_run)
    assert match and float(match.group(1)) > 0, cpu_run
    match = re.search(r"ratio tfp_bnn.predict.sample / Dense floor \[JAX throughput\]: (\S+)",
                      cpu_run)
    if "tfp_bnn.predict.sample does not run on JAX yet" in cpu_run:
        pytest.skip("DenseFlipout trains on JAX; tfp_bnn.predict.sample does not run there yet")
    assert match and float(match.group(1)) > 0, cpu_run


@pytest.mark.slow
def test_cpu_run_scores_the_main_job_on_jax(cpu_run):
    if "main job does not run on JAX here" in cpu_run:
        pytest.skip("the main job (python -m zoo, bbb_mlp) does not run on Keras' JAX "
                    "backend yet")
    assert re.search(r"^test RMSE \d+\.\d+ MPa", cpu_run, re.MULTILINE), cpu_run

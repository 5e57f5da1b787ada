"""Tests of zoo.run.outputs: a run's exported model.keras and SavedModel take raw rows of
the dataset and answer in the target's units; preprocessing.json holds the statistics.

The acceptance test trains dvi_mlp through the CLI: it is sampling-free (one moment
propagation pass is its predictive, `zoo.run.scoring.sampling_free`), so the exported
models reproduce results.json up to float32 rounding, with no Monte Carlo tolerance.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.data import UCIDataset
from tfp_bnn.data.uci import concrete_path
from zoo import cli
from zoo.run import datasets
from zoo.run import fingerprint
from zoo.run import outputs
from zoo.run import run_dir
from zoo.run import runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# Run in a fresh interpreter: the SavedModel and model.keras of the run at argv[1] on the
# raw test rows of the run's split, from the package's own loader (not zoo.run.datasets).
SCORE_RAW_ROWS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import keras
    import tfp_bnn
    import zoo.models.registry  # registers the zoo's model classes for model.keras
    from tfp_bnn.data import UCIDataset
    from tfp_bnn.data.uci import concrete_path

    run, split, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data = UCIDataset(concrete_path().parent, num_splits=20, seed=seed)
    _, test = data.splits[split]
    x, y = data.x[test].astype("float32"), np.asarray(data.y[test], np.float64).ravel()

    def scores(mean, variance):
        mean, variance = np.ravel(mean).astype(np.float64), np.ravel(variance).astype(np.float64)
        return {"rmse": float(np.sqrt(np.mean((y - mean) ** 2))),
                "log_likelihood": float(np.mean(-0.5 * np.log(2 * np.pi * variance)
                                                - 0.5 * (y - mean) ** 2 / variance))}

    loaded = tf.saved_model.load(run + "/saved_model")
    served = loaded.serve(tf.constant(x), tf.constant(1))
    model = tfp_bnn.saving.load_model(run + "/model.keras", safe_mode=True)
    outputs = keras.ops.convert_to_numpy(model(x))
    print(json.dumps({"saved_model": scores(served["mean"], served["stddev"].numpy() ** 2),
                      "keras": scores(outputs[:, 0], np.exp(outputs[:, 1])),
                      "raw_max": float(np.abs(x).max())}))
""")


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """The run directory of `python -m zoo train dvi_mlp --dataset concrete ...`.

    Run in-process, as `python -m zoo` runs `sys.exit(cli.main())` (a subprocess
    would add a TensorFlow start-up; the exported files are read back in a fresh
    interpreter by SCORE_RAW_ROWS). It asks for the threads this process
    already runs with, as TensorFlow's thread settings are fixed once it started.
    """
    out = tmp_path_factory.mktemp("runs") / "dvi_concrete"
    threads = str(fingerprint.threads()["intra_op"])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = cli.main(["train", "dvi_mlp", "--dataset", "concrete", "--out", str(out),
                         "--epochs", "2", "--seed", "1", "--quiet", "--threads", threads])
    assert code == 0, printed.getvalue()[-3000:]
    return out


@pytest.mark.slow
def test_exported_models_score_raw_rows_as_results_json(cli_run):
    stored = json.loads((cli_run / "results.json").read_text())
    done = subprocess.run([sys.executable, "-c", SCORE_RAW_ROWS, str(cli_run), "0", "1"],
                          check=True, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    fresh = json.loads(done.stdout.strip().splitlines()[-1])
    assert fresh["raw_max"] > 100.0  # raw concrete rows (kg/m^3), not standardised ones
    for served in (fresh["saved_model"], fresh["keras"]):
        # One deterministic pass each way: only float32 rounding differs (standardising
        # inside the model instead of in float64 beforehand), ~1e-6 relative.
        assert served["rmse"] == pytest.approx(stored["rmse"], rel=1e-4)
        assert served["log_likelihood"] == pytest.approx(stored["log_likelihood"], rel=1e-4)


def test_preprocessing_json_holds_the_training_statistics(cli_run):
    statistics = json.loads((cli_run / outputs.PREPROCESSING).read_text())
    split = UCIDataset(concrete_path().parent, num_splits=20, seed=1).split(0)
    np.testing.assert_allclose(statistics["x_mean"], split["x_scaler"].mean)
    np.testing.assert_allclose(statistics["x_std"], split["x_scaler"].std)
    assert statistics["y_mean"] == pytest.approx(float(split["y_scaler"].mean))
    assert statistics["y_std"] == pytest.approx(float(split["y_scaler"].std))
    assert outputs.PREPROCESSING in run_dir.read_marker(str(cli_run))  # the zoo's own file


def test_evaluate_scores_raw_rows_and_still_reads_runs_without_preprocessing(cli_run,
                                                                            tmp_path):
    stored, fresh = runner.evaluate(cli_run)
    for key in ("rmse", "log_likelihood", "coverage_95"):
        assert fresh[key] == pytest.approx(stored[key], rel=1e-4)
    # A run from before preprocessing.json: model.keras is the bare model on
    # standardised inputs.
    old = tmp_path / "old_run"
    old.mkdir()
    for name in ("config.json", "results.json"):
        (old / name).write_bytes((cli_run / name).read_bytes())
    import zoo.models.registry  # noqa: F401, PLC0415 - registers the zoo's model classes

    wrapped = tfp_bnn.saving.load_model(str(cli_run / "model.keras"), safe_mode=True)
    bare = wrapped.get_layer("dvi_mlp")
    bare.save(str(old / "model.keras"))
    old_stored, old_fresh = runner.evaluate(old)
    assert old_fresh["rmse"] == pytest.approx(stored["rmse"], rel=1e-4)
    task = datasets.load("concrete", split=0, seed=1)
    with pytest.raises(AssertionError):  # the bare model really wants standardised rows
        np.testing.assert_allclose(bare.predict(task.x_test_original, verbose=0)[:, 0],
                                   wrapped.predict(task.x_test_original, verbose=0)[:, 0],
                                   rtol=0.5)


def test_a_damaged_preprocessing_json_is_named(cli_run, tmp_path):
    run = tmp_path / "damaged"
    run.mkdir()
    for name in ("config.json", "results.json", "model.keras"):
        (run / name).write_bytes((cli_run / name).read_bytes())
    (run / outputs.PREPROCESSING).write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"preprocessing.json is damaged"):
        runner.evaluate(run)

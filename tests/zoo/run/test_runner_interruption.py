"""Reliability of `python -m zoo train`: SIGKILL mid-epoch, divergence, a wrong resume,
an interrupted `auto` run.

That every zoo model trains bit-identically twice on one thread is checked in
tests/integration/test_xla_and_seeds.py, in one process with the layers' check.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.callbacks import TrainingDiverged
from zoo import cli
from zoo.models import registry
from zoo.run import auto
from zoo.run import auto_choice
from zoo.run import runner
from zoo.run.candidates import Candidate

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
# The kill lands half an epoch after the 3rd checkpoint (see below): 8 leaves
# over 4 epochs before the run would end, and 4-5 resumed epochs to compare.
EPOCHS = 8
METRICS = ("rmse", "log_likelihood", "coverage_95", "mean_stddev")


def _env():
    path = [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                               else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2")


def _train_command(out, *extra):
    # batch 8: 116 steps per epoch, long enough to be killed inside one.
    return [sys.executable, "-m", "zoo", "train", "bbb_mlp", "--dataset", "concrete",
            "--epochs", str(EPOCHS), "--seed", "3", "--batch-size", "8", "--samples", "20",
            "--checkpoint-seconds", "0", "--quiet", "--out", str(out), *extra]


def _run(command, timeout=600):
    return subprocess.run(command, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _state(out):
    try:
        return json.loads((out / ".backup" / "state.json").read_text())
    except (OSError, ValueError):
        return None


# The rerun after the kill, then in the same process the uninterrupted run it is
# compared with (one TensorFlow start-up for the two). The rerun comes first, so
# that it starts in a fresh process as a user's rerun does; the reference must
# also equal the epochs the killed run (a fresh process) checkpointed, so a
# state it inherited from the rerun would show there.
RERUN_THEN_REFERENCE = """
import json, sys
from zoo import cli
rerun, reference = json.loads(sys.argv[1])
code = cli.main(rerun)
print("REFERENCE RUN", flush=True)
sys.exit(code or cli.main(reference))
"""


def _rerun_then_reference(out, reference_out):
    arguments = [_train_command(out)[3:], _train_command(reference_out)[3:]]
    return _run([sys.executable, "-c", RERUN_THEN_REFERENCE, json.dumps(arguments)])


@pytest.mark.slow
def test_sigkill_mid_epoch_then_rerun_finishes_like_an_uninterrupted_run(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(_train_command(out), cwd=REPO_ROOT, env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # Wait for two checkpoints, time one epoch, and kill half an epoch
        # after the next save: inside an epoch, between checkpoints.
        deadline = time.monotonic() + 300
        seen = {}
        while len(seen) < 2 and time.monotonic() < deadline and process.poll() is None:
            state = _state(out)
            if state and state["epoch"] >= 2 and state["epoch"] not in seen:
                seen[state["epoch"]] = time.monotonic()
            time.sleep(0.005)
        assert len(seen) == 2, process.stderr.read()[-3000:] if process.poll() else seen
        epoch_seconds = max(seen.values()) - min(seen.values())
        time.sleep(epoch_seconds / 2)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    killed_after = _state(out)["epoch"]
    assert 2 <= killed_after < EPOCHS
    assert not (out / "results.json").exists() and not (out / "model.keras").exists()
    killed_history = _state(out)["history"]

    reference = tmp_path / "uninterrupted"
    resumed = _rerun_then_reference(out, reference)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rerun_stdout = resumed.stdout.split("REFERENCE RUN")[0]
    assert f"resuming from the checkpoint after epoch {killed_after}" in rerun_stdout
    expected_results = json.loads((reference / "results.json").read_text())
    expected_history = json.loads((reference / "history.json").read_text())
    # The killed run was a new process with the same seed: the epochs it
    # checkpointed are the uninterrupted run's, to the bit.
    assert "loss" in killed_history and set(killed_history) <= set(expected_history)
    for key, values in killed_history.items():
        assert values == expected_history[key][:killed_after], key
    results = json.loads((out / "results.json").read_text())
    history = json.loads((out / "history.json").read_text())
    assert not (out / ".backup").exists() and not (out / ".staging").exists()
    assert len(history["loss"]) == EPOCHS == results["epochs"]
    # Tolerance 0. With --threads 1 (the default) every op runs in one fixed
    # order, and the resumed run restores everything that feeds later
    # epochs: weights, optimizer moments and step, every noise generator's
    # state, and the data order (a function of seed and epoch). The same
    # float32 operations on the same values give the same bits. A resume
    # that missed any of them moves the loss in the 3rd or 4th digit
    # (tests/callbacks/test_atomic_backup_and_restore.py has that control).
    assert history == expected_history
    for key in METRICS:
        assert results[key] == expected_results[key], key


class NanAfter(keras.losses.Loss):
    """The model's own loss, NaN from the `step`-th optimizer update on."""

    def __init__(self, inner, iterations, step):
        super().__init__(name="nan_after")
        self.inner, self.iterations, self.step = inner, iterations, step

    def call(self, y_true, y_pred):
        value = self.inner(y_true, y_pred)
        return tf.where(self.iterations >= self.step, tf.constant(np.nan, value.dtype), value)


def test_divergence_keeps_the_last_good_checkpoint_and_model(tmp_path, monkeypatch):
    build = registry.build_model

    def diverging(*args, **kwargs):
        model = build(*args, **kwargs)
        # yacht: 277 rows, batch 32 -> 9 steps an epoch; step 30 is in epoch 4.
        model.compile(optimizer=model.optimizer,
                      loss=NanAfter(model.loss, model.optimizer.iterations, 30))
        return model

    monkeypatch.setattr(registry, "build_model", diverging)
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"epoch 4, batch 4: loss is nan") as info:
        runner.train_and_evaluate("flipout_mlp", "yacht", out, epochs=8, seed=0, verbose=0,
                                  checkpoint_seconds=0)
    message = str(info.value)
    assert "the model after 3 epochs in" in message and ".backup" in message
    assert "no results were written" in message
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run", "last_good.keras"]
    state = json.loads((out / ".backup" / "state.json").read_text())
    assert state["epoch"] == 3 and all(np.isfinite(state["history"]["loss"]))
    # The kept model is the checkpoint's: same weights, all finite.
    kept = tfp_bnn.saving.load_model(out / "last_good.keras", safe_mode=True, compile=False)
    reference = build("flipout_mlp", (6,), num_train=277, seed=0)
    reference.optimizer.build(reference.trainable_variables)  # the file has its state too
    reference.load_weights(out / ".backup" / state["weights"])
    assert len(kept.weights) == len(reference.weights)
    for a, b in zip(kept.weights, reference.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert np.all(np.isfinite(np.asarray(a)))


def test_divergence_from_the_command_line_is_one_line_and_exit_3(tmp_path, capsys):
    # In-process, as `python -m zoo` runs `sys.exit(cli.main())`: the exit code
    # and the stderr line are main's (the SIGKILL test runs the real command).
    out = tmp_path / "run"
    code = cli.main(["train", "bbb_mlp", "--dataset", "concrete", "--epochs", "4", "--quiet",
                     "--set", "learning_rate=30", "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 3
    assert "Traceback" not in stderr
    lines = [x for x in stderr.splitlines() if x.startswith("python -m zoo")]
    assert len(lines) == 1 and "Training diverged in epoch 1" in lines[0]
    assert "smaller learning rate" in lines[0]
    assert not (out / "results.json").exists()
    model = tfp_bnn.saving.load_model(out / "last_good.keras", safe_mode=True)
    assert all(np.all(np.isfinite(np.asarray(w))) for w in model.weights)


class InterruptAtEpoch2(runner.DivergenceGuard):
    """The runner's guard, plus a Ctrl-C when the second epoch begins."""

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        if epoch == 1:
            raise KeyboardInterrupt


def test_a_rerun_with_other_arguments_does_not_resume_the_wrong_checkpoint(
        tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr(runner, "DivergenceGuard", InterruptAtEpoch2)
    with pytest.raises(KeyboardInterrupt):
        runner.train_and_evaluate("flipout_mlp", "yacht", out, epochs=3, verbose=0,
                                  checkpoint_seconds=0)
    monkeypatch.undo()
    # Interrupted: the checkpoint stays, nothing staged is left.
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run"] and _state(out)["epoch"] == 1
    with pytest.raises(ValueError, match=r"differs in: epochs \(3 then, 5 now\)\)"):
        runner.train_and_evaluate("flipout_mlp", "yacht", out, epochs=5, verbose=0)
    assert _state(out)["epoch"] == 1 and sorted(os.listdir(out)) == [".backup", ".zoo-run"]


AUTO_ONLY = (Candidate("tiny_dropout", "mc_dropout_mlp_heteroscedastic", {"hidden_units": (8,)},
                       batch_size=64, steps=200),)


def test_an_interrupted_auto_run_resumes_its_choice_without_searching_again(
        tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.setattr(auto, "CANDIDATES", AUTO_ONLY)
    monkeypatch.setattr(runner, "DivergenceGuard", InterruptAtEpoch2)
    with pytest.raises(KeyboardInterrupt):
        runner.train_and_evaluate("auto", "yacht", out, seed=1, num_samples=10, verbose=0,
                                  checkpoint_seconds=0)
    stored = json.loads((out / ".backup" / auto_choice.CHOICE_FILE).read_text())
    assert stored["epochs"] >= 2 and _state(out)["epoch"] == 1  # interrupted mid-run
    monkeypatch.setattr(runner, "DivergenceGuard", tfp_bnn.callbacks.DivergenceGuard)

    # Another seed is another run: it searches (its own choice is not stored over the
    # interrupted run's), and the checkpoint then refuses it.
    with pytest.raises(ValueError, match=r"differs in: .*seed \(1 then, 2 now\)"):
        runner.train_and_evaluate("auto", "yacht", out, seed=2, num_samples=10, verbose=0)
    assert "auto: choosing a model" in capsys.readouterr().out
    assert json.loads((out / ".backup" / auto_choice.CHOICE_FILE).read_text()) == stored

    # The same arguments: the stored choice trains on from the checkpoint; no search.
    def no_search(*args, **kwargs):
        raise AssertionError("searched again")
    monkeypatch.setattr(auto, "select", no_search)
    result = runner.train_and_evaluate("auto", "yacht", out, seed=1, num_samples=10,
                                       verbose=0)
    printed = capsys.readouterr().out
    assert "as the interrupted run chose (no new search)" in printed
    assert "resuming from the checkpoint after epoch 1" in printed
    assert result["selection"] == stored["selection"] and result["epochs"] == stored["epochs"]
    assert not (out / ".backup").exists()
    assert json.loads((out / "config.json").read_text())["overrides"] == {"hidden_units": [8]}

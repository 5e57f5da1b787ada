"""A hostile user's run directories: the zoo never loses or half-writes a file.

Every case ends in one line on stderr and exit code 2 (or a one-line
ValueError), and the files the user had are unchanged byte for byte.
"""

import contextlib
import dataclasses
import json
import os
import pathlib
import resource
import shutil
import signal

import numpy as np
import pytest

import tfp_bnn
from zoo import cli
from zoo.run import datasets
from zoo.models import registry
from zoo.run import run_dir
from zoo.run import fingerprint as run_fingerprint
from zoo.run import runner

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
YACHT = REPO_ROOT / "tfp_bnn" / "data" / "uci_sets" / "yacht"
PROG = "python -m zoo train: error:"


def _threads():
    # The fingerprint holds TensorFlow's thread settings; every command here
    # asks for the ones this process already runs with.
    return str(run_fingerprint.threads()["intra_op"])


def _argv(out, *extra, epochs=2, dataset="yacht"):
    return ["train", "bbb_mlp", "--dataset", str(dataset), "--epochs", str(epochs), "--quiet",
            "--samples", "5", "--checkpoint-seconds", "0", "--threads", _threads(),
            "--out", str(out), *extra]


def _main(argv, capsys):
    """(exit code, stdout, the stderr lines) of `python -m zoo ...` run in-process."""
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def _refused(argv, capsys, message, command="train"):
    code, _, lines = _main(argv, capsys)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(f"python -m zoo {command}: error:"), lines
    assert message in lines[0], lines
    return lines[0]


def _snapshot(root):
    """Every path under `root` (dotfiles too) -> its bytes, or None for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _state(out):
    return json.loads((out / ".backup" / "state.json").read_text())


class _InterruptAtEpoch2(runner.DivergenceGuard):
    """The runner's guard, plus a Ctrl-C as the second epoch begins."""

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        if epoch == 1:
            raise KeyboardInterrupt


def _interrupted(out, capsys, *extra, dataset="yacht"):
    """A run killed after its first epoch's checkpoint; 3 epochs planned."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "DivergenceGuard", _InterruptAtEpoch2)
        code, _, lines = _main(_argv(out, *extra, epochs=3, dataset=dataset), capsys)
    assert code == 130, lines
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run"] and _state(out)["epoch"] == 1
    return out


@pytest.fixture(scope="module")
def interrupted_yacht(tmp_path_factory):
    """One `_interrupted` run on yacht; tests work on byte-for-byte copies of it."""
    out = tmp_path_factory.mktemp("interrupted") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "DivergenceGuard", _InterruptAtEpoch2)
        assert cli.main(_argv(out, epochs=3)) == 130
    return out


@pytest.fixture
def interrupted(interrupted_yacht, tmp_path):
    """A fresh copy of the interrupted yacht run, checked as `_interrupted` checks its own."""
    out = tmp_path / "run"
    shutil.copytree(interrupted_yacht, out)
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run"] and _state(out)["epoch"] == 1
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert cli.main(_argv(out)) == 0
    return out


# --- user files are never replaced ------------------------------------------

def _user_file(name):
    def make(out):
        (out / name).write_bytes(b"the user's own " + name.encode() + b"\x00\xff")
    return make


def _user_saved_model(out):
    (out / "saved_model" / "variables").mkdir(parents=True)
    (out / "saved_model" / "saved_model.pb").write_bytes(b"my own export")
    (out / "saved_model" / "variables" / "v.index").write_bytes(b"weights")


@pytest.mark.parametrize("make", [
    _user_file("model.keras"), _user_file("config.json"), _user_file("history.json"),
    _user_file("training.png"), _user_file("last_good.keras"), _user_saved_model,
    _user_file(".backup")], ids=["model.keras", "config.json", "history.json", "training.png",
                                 "last_good.keras", "saved_model_dir", "dot_backup_file"])
def test_user_files_with_artifact_names_are_refused_untouched(make, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    make(out)
    before = _snapshot(out)
    _refused(_argv(out), capsys, "not empty and not a zoo run directory")
    assert _snapshot(out) == before


def test_a_file_the_marker_does_not_list_is_never_replaced(interrupted, capsys):
    out = interrupted
    (out / "model.keras").write_bytes(b"put here by the user between the two runs")
    before = _snapshot(out)
    _refused(_argv(out, epochs=3), capsys, "holds files the zoo did not write (['model.keras'])")
    assert _snapshot(out) == before


def _users_checkpoints(root):
    folder = root / "ckpts"
    folder.mkdir()
    for name in ("epoch-1.weights.h5", "best.weights.h5", "notes.txt"):
        (folder / name).write_bytes(b"the user's " + name.encode())
    return folder


def test_a_backup_replaced_by_a_symlink_is_refused_and_its_target_kept(interrupted, capsys):
    # `ln -s ~/ckpts run/.backup` between the interrupted run and its rerun:
    # the rerun would have deleted every *.weights.h5 in ~/ckpts.
    out = interrupted
    folder = _users_checkpoints(out.parent)
    shutil.rmtree(out / ".backup")
    (out / ".backup").symlink_to(folder)
    before, theirs = _snapshot(out), _snapshot(folder)
    _refused(_argv(out, epochs=3), capsys, "'.backup' is a symbolic link the zoo did not make")
    assert _snapshot(out) == before and _snapshot(folder) == theirs


def test_a_file_put_into_the_backup_is_refused_untouched(interrupted, capsys):
    out = interrupted
    (out / ".backup" / "best.weights.h5").write_bytes(b"the user's")
    before = _snapshot(out)
    _refused(_argv(out, epochs=3), capsys, "holds files the checkpoint did not write "
                                           "(['best.weights.h5'])")
    assert _snapshot(out) == before


def test_a_file_dropped_into_the_backup_during_the_run_is_not_deleted(tmp_path, capsys):
    out = tmp_path / "run"

    class DropsAFile(runner.DivergenceGuard):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == 1:  # the guard runs before the save: .backup holds epoch 1's
                (out / ".backup" / "notes.txt").write_text("the user's notes")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "DivergenceGuard", DropsAFile)
        code, _, lines = _main(_argv(out, epochs=2), capsys)
    assert code == 0, lines
    assert (out / "results.json").exists()
    assert os.listdir(out / ".backup") == ["notes.txt"]
    assert (out / ".backup" / "notes.txt").read_text() == "the user's notes"


def test_a_file_dropped_in_during_the_run_is_not_replaced_at_publish(tmp_path, capsys):
    out = tmp_path / "run"

    class DropsAFile(runner.DivergenceGuard):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            (out / "config.json").write_text("the user's notes")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "DivergenceGuard", DropsAFile)
        _refused(_argv(out, epochs=1), capsys, "was not written by the zoo; refusing to replace")
    assert (out / "config.json").read_text() == "the user's notes"
    assert not (out / "results.json").exists() and not (out / ".staging").exists()
    assert _state(out)["epoch"] == 1  # the checkpoint stays for a rerun


def test_a_damaged_marker_is_refused(interrupted, capsys):
    out = interrupted
    (out / run_dir.MARKER).write_text("null")
    before = _snapshot(out)
    _refused(_argv(out, epochs=3), capsys, ".zoo-run is damaged")
    assert _snapshot(out) == before


def test_a_finished_run_is_refused_untouched(finished, capsys):
    before = _snapshot(finished)
    _refused(_argv(finished), capsys, "already holds a finished run")
    assert _snapshot(finished) == before


def test_an_empty_existing_directory_is_taken_and_marked(finished, tmp_path):
    listed = json.loads((finished / run_dir.MARKER).read_text())
    assert listed["created_by"] == "python -m zoo train"
    assert sorted(listed["files"]) == sorted(p.name for p in finished.iterdir()
                                             if p.name != run_dir.MARKER)
    assert not (finished / run_dir.LOCK).exists()


# --- one process at a time --------------------------------------------------

def test_a_second_train_is_locked_out_and_touches_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    holder = run_dir.claim(out)  # what a running `train` holds
    try:
        before = _snapshot(out)
        line = _refused(_argv(out), capsys, "is in use by another `python -m zoo train`")
        assert f"(pid {os.getpid()})" in line
        assert _snapshot(out) == before
    finally:
        holder.release()
    assert not (out / run_dir.LOCK).exists()


def test_the_lock_is_refused_at_claim_time_too(tmp_path):
    out = tmp_path / "run"
    holder = run_dir.claim(out)
    try:
        with pytest.raises(ValueError, match=rf"in use by .*\(pid {os.getpid()}\)"):
            run_dir.claim(out)
    finally:
        holder.release()


def test_resume_with_the_marker_and_a_stale_lock_file_finishes(interrupted, capsys):
    out = interrupted
    # A SIGKILLed run leaves its lock file; the kernel released the lock.
    (out / run_dir.LOCK).write_text("999999\n")
    code, stdout, lines = _main(_argv(out, epochs=3), capsys)
    assert code == 0, lines
    assert "resuming from the checkpoint after epoch 1" in stdout
    assert len(json.loads((out / "history.json").read_text())["loss"]) == 3
    assert not (out / ".backup").exists() and not (out / run_dir.LOCK).exists()


# --- a checkpoint resumes only what made it ---------------------------------

def test_changed_data_file_is_refused(tmp_path, capsys):
    data = tmp_path / "yacht"
    shutil.copytree(YACHT, data)
    out = _interrupted(tmp_path / "run", capsys, dataset=data)
    rows = (data / "data.txt").read_text().splitlines()
    rows[0] = rows[0].replace("0.11", "0.12")
    (data / "data.txt").write_text("\n".join(rows) + "\n")
    before = _snapshot(out)
    line = _refused(_argv(out, epochs=3, dataset=data), capsys,
                    "was made with other data/arguments (differs in: data)")
    assert f"delete {out / '.backup'}" in line
    assert _snapshot(out) == before


def test_changed_threads_are_refused(interrupted, capsys, monkeypatch):
    out = interrupted
    before = _snapshot(out)
    # As another --threads would leave TensorFlow (it cannot change in-process).
    monkeypatch.setattr(run_fingerprint, "threads", lambda: {"intra_op": 7, "inter_op": 7})
    _refused(_argv(out, epochs=3), capsys, "(differs in: threads (")
    assert _snapshot(out) == before


def test_changed_set_override_is_refused(interrupted, capsys):
    out = interrupted
    before = _snapshot(out)
    _refused(_argv(out, "--set", "hidden_units=[8]", epochs=3), capsys,
             "(differs in: overrides ({} then, {'hidden_units': [8]} now))")
    assert _snapshot(out) == before


def test_the_fingerprint_holds_data_threads_and_versions():
    task = datasets.load("yacht")
    fingerprint = run_fingerprint.fingerprint({"model": "m", "num_samples": 5}, task)
    assert fingerprint["data"] == run_fingerprint.data_digest(task)
    assert fingerprint["versions"]["tfp_bnn"] == tfp_bnn.__version__
    assert set(fingerprint["threads"]) == {"intra_op", "inter_op"}
    assert "num_samples" not in fingerprint
    task.x_test[0, 0] += 1.0
    assert run_fingerprint.data_digest(task) != fingerprint["data"]


# --- writes that fail -------------------------------------------------------

@contextlib.contextmanager
def _file_size_limit(limit_bytes):
    """Writes of files past `limit_bytes` fail in this process with EFBIG ("File too large")
    from the kernel, as on a full quota; the soft limit is put back after."""
    # Python ignores SIGXFSZ at start-up, so the write fails instead of killing the process.
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _limited_train(out, limit_bytes, epochs, capsys):
    """`python -m zoo train` (in-process) when no file may grow above `limit_bytes`."""
    capsys.readouterr()
    with _file_size_limit(limit_bytes):
        code = cli.main(_argv(out, epochs=epochs))
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("python -m zoo")]
    assert len(ours) == 1, err[-3000:]
    return ours[0]


def _loads_into_a_fresh_model(out):
    state = _state(out)
    fresh = registry.build_model("bbb_mlp", (6,), num_train=277, seed=0, decay_steps=3 * 9)
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(out / ".backup" / state["weights"])
    assert all(np.all(np.isfinite(np.asarray(w))) for w in fresh.weights)


@pytest.mark.slow
def test_disk_full_during_a_checkpoint_keeps_the_last_one(interrupted, capsys):
    out = interrupted
    # A checkpoint of bbb_mlp is ~35 KB: at 16 KB per file every save fails.
    line = _limited_train(out, 16 * 1024, epochs=3, capsys=capsys)
    assert "Cannot write the checkpoint of epoch 2: File too large" in line
    assert "the last complete checkpoint" in line
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run"]
    assert _state(out)["epoch"] == 1
    assert sorted(os.listdir(out / ".backup")) == ["epoch-1.weights.h5", "state.json"]
    _loads_into_a_fresh_model(out)
    code, stdout, lines = _main(_argv(out, epochs=3), capsys)  # space freed: resumes
    assert code == 0, lines
    assert "resuming from the checkpoint after epoch 1" in stdout
    assert (out / "results.json").exists()


@pytest.mark.slow
def test_disk_full_during_the_final_export_leaves_no_artifact(tmp_path, capsys):
    out = tmp_path / "run"
    # 96 KB: the checkpoints (~35 KB), plots and model.keras fit; the
    # SavedModel's graph (~150 KB) does not.
    line = _limited_train(out, 96 * 1024, epochs=2, capsys=capsys)
    assert "File too large" in line
    assert sorted(os.listdir(out)) == [".backup", ".zoo-run"]
    assert _state(out)["epoch"] == 2
    code, _, lines = _main(_argv(out, epochs=2), capsys)
    assert code == 0, lines
    assert (out / "results.json").exists() and (out / "saved_model").is_dir()


def test_a_full_disk_names_the_file_and_the_limit(tmp_path, capsys):
    # 80 bytes: the marker holds its first two names, not a third; a failed
    # write() names no file, and "File too large" alone says nothing of why.
    out = tmp_path / "run"
    line = _limited_train(out, 80, epochs=1, capsys=capsys)
    assert f"File too large (writing {out / '.zoo-run'}: the file would pass the size " \
           "limit on files (ulimit -f) or the disk is full)" in line
    assert not (out / ".zoo-run.tmp").exists()


def _permissions_enforced(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o500)
    try:
        (probe / "x").write_text("x")
    except PermissionError:
        return True
    finally:
        probe.chmod(0o700)
    return False  # root with CAP_DAC_OVERRIDE ignores permissions


@pytest.mark.parametrize("where", [".backup", "."])
def test_permission_lost_mid_run_is_one_line_and_resumable(where, tmp_path, capsys):
    if not _permissions_enforced(tmp_path):
        pytest.skip("this user ignores file permissions (root)")
    out = tmp_path / "run"

    class RevokesWriting(runner.DivergenceGuard):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == 1:  # after the first checkpoint, before the second
                (out / where).chmod(0o500)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "DivergenceGuard", RevokesWriting)
            _refused(_argv(out, epochs=3), capsys, "Permission denied")
    finally:
        (out / where).chmod(0o755)
    assert not (out / "results.json").exists()
    epoch = _state(out)["epoch"]
    assert epoch == (1 if where == ".backup" else 3)
    code, stdout, lines = _main(_argv(out, epochs=3), capsys)
    assert code == 0, lines
    assert (out / "results.json").exists()


# --- scoring that overflows -------------------------------------------------

def _overflowing(monkeypatch, y_scale):
    """datasets.load giving test inputs just below float32's limit and targets in units
    `y_scale` (finite data whose predictions in the data's units overflow)."""
    load = datasets.load

    def overflowing(*args, **kwargs):
        task = load(*args, **kwargs)
        x_test = task.x_test * np.float32(1e38 / (1 + np.abs(task.x_test).max()))
        return dataclasses.replace(task, x_test=x_test, y_scale=y_scale)

    monkeypatch.setattr(datasets, "load", overflowing)


def test_non_finite_test_metrics_are_refused_and_leave_nothing(tmp_path, capsys, monkeypatch):
    _overflowing(monkeypatch, 1e140)
    out = tmp_path / "run"
    line = _refused(_argv(out, epochs=1), capsys,
                    "Scoring the trained model on the test data of 'yacht' overflowed: the "
                    "metrics are not finite (")
    assert "rmse inf" in line and "log_likelihood nan" in line
    assert not out.exists()  # it created the directory: nothing of it is left


def test_a_prediction_that_cannot_be_rescaled_keeps_no_checkpoint(tmp_path, capsys,
                                                                  monkeypatch):
    _overflowing(monkeypatch, 1e200)
    out = tmp_path / "mine"
    out.mkdir()
    _refused(_argv(out, epochs=1), capsys, "Removed the checkpoint; no results were written")
    assert os.listdir(out) == []  # as it was: no .backup to resume into the same failure


# --- evaluate on damaged run files ------------------------------------------

@pytest.mark.parametrize("name, damage, message", [
    ("config.json", "null", "config.json is not a zoo run configuration (a JSON NoneType"),
    ("config.json", "[1, 2]", "config.json is not a zoo run configuration (a JSON list"),
    ("config.json", {"split": "x"}, "config.json is damaged: split is 'x'"),
    ("config.json", {"num_samples": 10**7}, "config.json is damaged: num_samples is 10000000"),
    ("results.json", "null", "results.json is not a zoo run's results (a JSON NoneType"),
    ("results.json", "[]", "results.json is not a zoo run's results (a JSON list"),
    ("results.json", {"rmse": "high"}, "results.json is damaged: rmse must be numbers"),
    # Past --seed's range: another split of the data, mixing training rows into the test.
    ("config.json", {"seed": 2**70}, "config.json is damaged: seed is 1180591620717411303424"),
    ("config.json", {"split": 10**6}, "config.json is damaged: split is 1000000"),
    ("results.json", "[" * 100_000 + "]" * 100_000, "results.json is corrupted: its JSON is "
                                                    "nested too deeply"),
], ids=["config_null", "config_list", "config_split_str", "config_num_samples_huge",
        "results_null", "results_list", "results_rmse_str", "config_seed_2_to_70",
        "config_split_10_to_6", "results_100000_deep"])
def test_evaluate_names_the_damaged_file(name, damage, message, finished, tmp_path, capsys):
    run = tmp_path / "copy"
    shutil.copytree(finished, run)
    if isinstance(damage, dict):
        damage = json.dumps(dict(json.loads((run / name).read_text()), **damage))
    (run / name).write_text(damage)
    before = _snapshot(run)
    line = _refused(["evaluate", str(run)], capsys, message, command="evaluate")
    assert str(run / name) in line
    assert _snapshot(run) == before


def test_evaluate_of_a_file_says_it_is_not_a_directory(tmp_path, capsys):
    run = tmp_path / "run.txt"
    run.write_text("not a run")
    _refused(["evaluate", str(run)], capsys, f"{str(run)!r} is not a directory",
             command="evaluate")


@pytest.mark.parametrize("link, message", [
    ("model.keras", "model.keras is a symbolic link loop"),
    ("elsewhere.keras", "model.keras is a symbolic link to nothing"),
])
def test_evaluate_tells_a_bad_link_from_a_missing_file(link, message, finished, tmp_path,
                                                       capsys):
    run = tmp_path / "copy"
    shutil.copytree(finished, run)
    (run / "model.keras").unlink()
    (run / "model.keras").symlink_to(run / link)
    line = _refused(["evaluate", str(run)], capsys, message, command="evaluate")
    assert "missing" not in line

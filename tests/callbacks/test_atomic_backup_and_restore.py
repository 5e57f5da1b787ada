"""AtomicBackupAndRestore: exact resume (weights, optimizer, noise, history), safe files."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import AtomicBackupAndRestore
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.callbacks.atomic_backup_and_restore import seed_states
from tfp_bnn.data import shuffled_epochs
from tfp_bnn.data import steps_per_epoch
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization

NUM, BATCH, EPOCHS = 96, 32, 4
FINGERPRINT = {"epochs": EPOCHS, "lr": 0.01}


def _data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(NUM, 4)).astype("float32")
    return x, (x[:, :1] * 2 - x[:, 1:2]).astype("float32")


def _model():
    keras.utils.set_random_seed(5)
    model = keras.Sequential([
        keras.Input((4,)), DenseFlipout(8, activation="relu", seed=1),
        DenseReparameterization(1, seed=2, prior="scale_mixture"),  # Monte Carlo KL
    ])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    return model


def _fit(model, backup, first, last):
    x, y = _data()
    return model.fit(shuffled_epochs(x, y, BATCH, 7, last, first), epochs=last,
                     initial_epoch=first, steps_per_epoch=steps_per_epoch(NUM, BATCH),
                     shuffle=False, verbose=0, callbacks=[KLScheduler(NUM), backup])


def _variables(model):
    return [np.array(v) for v in model.variables]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    model = _model()
    backup = AtomicBackupAndRestore(tmp_path_factory.mktemp("full") / "backup")
    history = _fit(model, backup, 0, EPOCHS)
    assert not os.path.exists(backup.backup_dir)  # deleted when fit completes
    return _variables(model), history.history


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """`checkpoints(epochs, tmp_path)`: (tmp_path / "backup", variables).

    The directory is a copy of the checkpoint a run left when it stopped
    after `epochs` epochs (fingerprint FINGERPRINT, checkpoint kept), the
    variables are that run's model's at the end. Each such run is trained once
    per module; every test gets its own copy to damage or resume from.
    """
    made = {}

    def get(epochs, tmp_path):
        if epochs not in made:
            source = tmp_path_factory.mktemp(f"after_{epochs}") / "backup"
            model = _model()
            _fit(model, AtomicBackupAndRestore(source, fingerprint=FINGERPRINT,
                                               delete_checkpoint=False), 0, epochs)
            made[epochs] = (source, _variables(model))
        source, variables = made[epochs]
        directory = tmp_path / "backup"
        shutil.copytree(source, directory)
        return directory, variables

    return get


def test_resumed_run_equals_the_uninterrupted_one_bit_for_bit(uninterrupted, checkpoints,
                                                               tmp_path):
    full_variables, full_history = uninterrupted
    directory, _ = checkpoints(2, tmp_path)  # "killed" after two epochs
    state = json.loads((directory / "state.json").read_text())
    assert state["epoch"] == 2 and len(state["history"]["loss"]) == 2
    assert sorted(os.listdir(directory)) == ["epoch-2.weights.h5", "state.json"]
    assert len(state["seed_states"]) == 2  # one generator per layer, not in the .h5

    model = _model()  # a fresh process would build the same model from the seed
    again = AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT)
    assert again.restored_epoch() == 2
    history = _fit(model, again, again.restored_epoch(), EPOCHS)
    assert history.epoch == [2, 3]
    # Same float operations in the same order on the same values: equal,
    # not just close. (A fresh noise state or data order changes the loss in
    # the 3rd digit; see the next test.)
    for now, full in zip(_variables(model), full_variables):
        np.testing.assert_array_equal(now, full)
    merged = again.merged_history(history.history)
    assert merged == {k: [float(v) for v in values] for k, values in full_history.items()}


def test_noise_state_matters_for_the_resume(uninterrupted, checkpoints, tmp_path):
    # The control for the test above: restoring weights but not the noise
    # generators (what Keras' own BackupAndRestore does) gives another run.
    full_variables, _ = uninterrupted
    directory, _ = checkpoints(2, tmp_path)
    state = json.loads((directory / "state.json").read_text())
    state["seed_states"] = [[path, [0, 0]] for path, _ in state["seed_states"]]
    (directory / "state.json").write_text(json.dumps(state))
    model = _model()
    _fit(model, AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT), 2, EPOCHS)
    differences = [np.max(np.abs(now - full)) for now, full
                   in zip(_variables(model), full_variables) if now.dtype.kind == "f"]
    assert max(differences) > 1e-4


def test_another_runs_checkpoint_is_refused(checkpoints, tmp_path):
    directory, _ = checkpoints(1, tmp_path)
    other = AtomicBackupAndRestore(directory, fingerprint={**FINGERPRINT, "lr": 0.1})
    with pytest.raises(ValueError,
                       match=r"other data/arguments \(differs in: lr \(0.01 then, 0.1 now\)\)"):
        other.restored_epoch()


@pytest.mark.parametrize("damage, message", [
    ("truncate_state", "cannot be read"),
    ("delete_weights", "names a missing weights file"),
    ("garbage_weights", "does not fit this model"),
])
def test_a_damaged_checkpoint_gives_a_clear_error(checkpoints, tmp_path, damage, message):
    directory, _ = checkpoints(1, tmp_path)
    weights = directory / "epoch-1.weights.h5"
    if damage == "truncate_state":
        text = (directory / "state.json").read_text()
        (directory / "state.json").write_text(text[: len(text) // 2])
    elif damage == "delete_weights":
        weights.unlink()
    else:
        weights.write_bytes(b"not an hdf5 file")
    with pytest.raises(ValueError, match=message):
        _fit(_model(), AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT), 1, 2)


def test_a_checkpoint_for_another_architecture_is_refused(checkpoints, tmp_path):
    directory, _ = checkpoints(1, tmp_path)
    keras.utils.set_random_seed(5)
    wider = keras.Sequential([keras.Input((4,)), DenseFlipout(16, seed=1),
                              DenseReparameterization(1, seed=2)])
    wider.compile("adam", "mse")
    with pytest.raises(ValueError, match="does not fit this model"):
        _fit(wider, AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT), 1, 2)


def test_leftovers_of_a_killed_save_are_ignored_and_cleaned(checkpoints, tmp_path):
    # A kill during a save leaves a partial file; state.json still names
    # the complete one, and the next save removes the partial one.
    directory, _ = checkpoints(1, tmp_path)
    (directory / "partial-2.weights.h5").write_bytes(b"half a file")
    (directory / "state.json.partial").write_text("{\"epoch\": 2")
    backup = AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT, delete_checkpoint=False)
    assert backup.restored_epoch() == 1
    _fit(_model(), backup, 1, 2)
    assert sorted(os.listdir(directory)) == ["epoch-2.weights.h5", "state.json"]


def test_restore_without_fit_when_every_epoch_is_done(checkpoints, tmp_path):
    directory, trained = checkpoints(2, tmp_path)
    model = _model()
    backup = AtomicBackupAndRestore(directory, fingerprint=FINGERPRINT)
    assert backup.restore(model) == 2
    for now, then in zip(_variables(model), trained):
        np.testing.assert_array_equal(now, then)
    assert len(backup.merged_history({})["loss"]) == 2


def test_save_interval_skips_epoch_ends_but_keeps_the_last(tmp_path, monkeypatch):
    # A clock that advances 1 s per epoch end read: with save_interval 2.5
    # the epochs saved are those 3 s after the previous save, and the last.
    clock = {"now": 0.0}

    def monotonic():
        return clock["now"]

    class Tick(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            clock["now"] += 1.0

    monkeypatch.setattr("tfp_bnn.callbacks.atomic_backup_and_restore.time.monotonic",
                        monotonic)
    directory = tmp_path / "backup"
    saved = []
    backup = AtomicBackupAndRestore(directory, delete_checkpoint=False, save_interval=2.5)
    original = backup._save
    monkeypatch.setattr(backup, "_save", lambda epoch: (saved.append(epoch), original(epoch)))
    x, y = _data()
    _model().fit(shuffled_epochs(x, y, BATCH, 7, 7), epochs=7, shuffle=False, verbose=0,
                 steps_per_epoch=steps_per_epoch(NUM, BATCH), callbacks=[Tick(), backup])
    assert saved == [3, 6, 7]
    state = json.loads((directory / "state.json").read_text())
    assert state["epoch"] == 7 and len(state["history"]["loss"]) == 7


def test_seed_states_are_the_generators_of_the_model():
    model = _model()
    assert len(seed_states(model)) == 2
    assert all(v.dtype in ("int64", "uint32", "int32") for v in seed_states(model))


@pytest.mark.parametrize("kwargs, message", [
    ({"backup_dir": ""}, "`backup_dir`"),
    ({"backup_dir": None}, "`backup_dir`"),
    ({"backup_dir": "b", "fingerprint": {"f": object()}}, "`fingerprint`"),
    ({"backup_dir": "b", "save_interval": -1}, "`save_interval`"),
    ({"backup_dir": "b", "save_interval": float("nan")}, "`save_interval`"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AtomicBackupAndRestore(**kwargs)


def _users_folder(root):
    folder = root / "ckpts"
    folder.mkdir()
    for name in ("mine.weights.h5", "epoch-1.weights.h5", "notes.txt"):
        (folder / name).write_bytes(b"the user's")
    return folder


def test_a_backup_dir_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path):
    folder = _users_folder(tmp_path)
    link = tmp_path / "backup"
    link.symlink_to(folder)
    before = sorted(os.listdir(folder))
    with pytest.raises(ValueError, match="is a symbolic link"):
        _fit(_model(), AtomicBackupAndRestore(link), 0, 2)
    assert sorted(os.listdir(folder)) == before
    assert all((folder / name).read_bytes() == b"the user's" for name in before)


def test_a_backup_dir_holding_other_files_is_refused_before_anything_is_read(tmp_path):
    folder = _users_folder(tmp_path)
    backup = AtomicBackupAndRestore(folder)
    with pytest.raises(ValueError, match=r"holds files the checkpoint did not write "
                                         r"\(\['mine.weights.h5', 'notes.txt'\]\)"):
        backup.restored_epoch()
    assert sorted(os.listdir(folder)) == ["epoch-1.weights.h5", "mine.weights.h5", "notes.txt"]


@pytest.mark.parametrize("delete_checkpoint", [True, False])
def test_a_model_checkpoint_in_the_same_directory_keeps_its_file(tmp_path, delete_checkpoint):
    # Keras' ModelCheckpoint writes its file there at every epoch end, just
    # before the backup saves; neither the saves nor the end of training
    # delete it.
    directory = tmp_path / "backup"
    directory.mkdir()
    keep = keras.callbacks.ModelCheckpoint(str(directory / "best.weights.h5"),
                                           save_weights_only=True)
    backup = AtomicBackupAndRestore(directory, delete_checkpoint=delete_checkpoint)
    x, y = _data()
    _model().fit(shuffled_epochs(x, y, BATCH, 7, 3), epochs=3, shuffle=False, verbose=0,
                 steps_per_epoch=steps_per_epoch(NUM, BATCH),
                 callbacks=[KLScheduler(NUM), keep, backup])
    left = sorted(os.listdir(directory))
    assert left == (["best.weights.h5"] if delete_checkpoint
                    else ["best.weights.h5", "epoch-3.weights.h5", "state.json"])


def test_shared_files_are_neither_refused_nor_deleted(tmp_path):
    directory = tmp_path / "backup"
    directory.mkdir()
    (directory / "settings.json").write_text("{}")
    backup = AtomicBackupAndRestore(directory, shared_files=["settings.json"])
    _fit(_model(), backup, 0, 2)
    assert sorted(os.listdir(directory)) == ["settings.json"]
    with pytest.raises(ValueError, match="`shared_files`"):
        AtomicBackupAndRestore(directory, shared_files=["../elsewhere"])


def test_a_link_under_a_checkpoint_name_is_refused_and_its_target_kept(tmp_path):
    # A save opens partial-<k>.weights.h5 for writing: through a link it
    # would truncate the file the link points at.
    theirs = tmp_path / "precious.h5"
    theirs.write_bytes(b"the user's")
    directory = tmp_path / "backup"
    directory.mkdir()
    (directory / "partial-1.weights.h5").symlink_to(theirs)
    with pytest.raises(ValueError, match=r"did not write \(\['partial-1.weights.h5'\]\)"):
        _fit(_model(), AtomicBackupAndRestore(directory), 0, 1)
    assert theirs.read_bytes() == b"the user's"

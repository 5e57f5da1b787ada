"""Keras' BackupAndRestore with checkpoints that a kill at any instant cannot corrupt."""

import io
import json
import os
import re
import time

import keras

from tfp_bnn import _keras_internals
from tfp_bnn._keras_internals import seed_states
from tfp_bnn import _validation as check

STATE = "state.json"
# The names this callback writes into its directory (and may delete there).
_OWN_NAME = re.compile(r"(?:epoch|partial)-[0-9]+\.weights\.h5|state\.json(?:\.partial)?")


def is_checkpoint_file(name):
    """Whether `name` is one `AtomicBackupAndRestore` writes into its directory."""
    return bool(_OWN_NAME.fullmatch(name))


def weights_bytes(model):
    """The bytes `model.save_weights("x.weights.h5")` writes, built in memory.

    What Keras' `save_weights` does, into a
    BytesIO: h5py writing straight to disk turns a failed write (disk full,
    file too large, permission lost) into a stream of errors from its
    destructors and then a segmentation fault; here the file is written by
    Python, which raises one clean OSError.
    """
    buffer = io.BytesIO()
    store = _keras_internals.H5IOStore(buffer, mode="w")
    try:
        _keras_internals.save_weights_state(model, store)
    finally:
        store.close()
    return buffer.getvalue()


def _write_durably(path, data):
    try:
        with open(path, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as error:
        if error.filename:
            raise
        raise OSError(error.errno, error.strerror, path) from None  # write() names no file


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


@keras.saving.register_keras_serializable(package="tfp_bnn")
class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that survives SIGKILL and keeps the history.

    Keras' callback overwrites `latest.weights.h5` and then
    `training_metadata.json` in place: a process killed while writing
    leaves a truncated file (which fails to load) or weights of epoch k+1
    with the epoch count k (which repeats an epoch). Here each epoch end
    writes `epoch-<k>.weights.h5` completely, then replaces `state.json`
    (epoch, weights file name, the logs of every finished epoch, and the
    caller's `fingerprint`) with one atomic rename, then deletes the older
    weights file. Whatever instant the process dies, `state.json` names a
    complete weights file of the epoch it records.

    The weights file holds the model's variables and the optimizer state;
    `state.json` adds every `keras.random.SeedGenerator` state (which
    `save_weights` leaves out), so a resumed run draws the same noise as an
    uninterrupted one. The data order is the caller's affair:
    `fit(shuffle=True)` on arrays reshuffles from a stateful kernel that no
    checkpoint holds (`tfp_bnn.data.shuffled_epochs` gives an order that
    depends only on the seed and the epoch).

    The directory is the callback's own: it deletes only the files it
    writes there (`epoch-<k>.weights.h5`, `state.json` and their partial
    versions), never another file, and it refuses (ValueError, before
    anything is read or written) a `backup_dir` that is a symbolic link,
    is not a directory, or holds other files than those and
    `shared_files`. Keras' own callback deletes the whole `backup_dir` when
    training ends; this one deletes its files and then the directory only
    if nothing else is left in it.

    Args:
        backup_dir: directory of the checkpoint (used by nothing else).
        fingerprint: JSON-able description of the run (model, data,
            hyperparameters). A checkpoint written with another fingerprint
            is refused with a ValueError naming the keys that differ,
            instead of being loaded into a different model.
        delete_checkpoint: delete `backup_dir` when `fit` completes.
        save_interval: seconds. 0 (default) saves at every epoch end, as
            Keras does; a positive value skips epoch ends until that long has
            passed since the last save (and always saves the last epoch).
            A save costs ~15 ms for a small MLP, a fifth of a 30-step epoch;
            a resumed run repeats at most `save_interval` seconds of
            training and still ends exactly where an uninterrupted one does.
        shared_files: names of the caller's own files that may lie in
            `backup_dir` beside the checkpoint (say, a record of the run's
            settings); they are neither refused nor deleted.

    Example:
    >>> x = np.random.rand(32, 3).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile("adam", "mse")
    >>> backup = AtomicBackupAndRestore("run/backup", fingerprint={"units": 1},
    ...                                 delete_checkpoint=False)
    >>> history = model.fit(x, y, epochs=2, verbose=0, callbacks=[backup])
    >>> backup.restored_epoch()
    2

    A second `fit` with the same directory (say after the process was
    killed) resumes after epoch 2 and runs only epoch 3:

    >>> history = model.fit(x, y, epochs=3, verbose=0, callbacks=[backup])
    >>> len(history.history["loss"]), len(backup.merged_history(history.history)["loss"])
    (1, 3)
    """

    def __init__(self, backup_dir, fingerprint=None, delete_checkpoint=True, save_interval=0.0,
                 shared_files=()):
        if not backup_dir or not isinstance(backup_dir, (str, os.PathLike)):
            raise ValueError(f"`backup_dir` must be a directory path, got {backup_dir!r}.")
        super().__init__(os.fspath(backup_dir), save_freq="epoch",
                         delete_checkpoint=delete_checkpoint)
        try:
            # As it will read back from state.json (tuples become lists).
            self.fingerprint = json.loads(json.dumps(fingerprint))
        except (TypeError, ValueError) as error:
            raise ValueError(f"`fingerprint` must be JSON-serialisable: {error}") from None
        self.save_interval = check.number("save_interval", save_interval, low=0.0)
        if isinstance(shared_files, (str, bytes)) or not all(
                isinstance(name, str) and name and os.path.basename(name) == name
                for name in shared_files):
            raise ValueError("`shared_files` must be a list of file names (no directories), "
                             f"got {shared_files!r}.")
        self.shared_files = tuple(shared_files)
        # Names of this callback's files in backup_dir: its leftovers found
        # there, and what it writes. Only these are ever deleted.
        self._own = set()
        self._last_save = None
        self._state_path = os.path.join(self.backup_dir, STATE)
        self._history = {}  # every finished epoch's logs, saved in state.json
        self._restored_history = {}  # the part of it read from the checkpoint

    def get_config(self):
        return {"backup_dir": self.backup_dir, "fingerprint": self.fingerprint,
                "delete_checkpoint": self.delete_checkpoint,
                "save_interval": self.save_interval, "shared_files": list(self.shared_files)}

    # --- reading the checkpoint -------------------------------------------
    def _check_directory(self):
        """Refuses a backup_dir that is not this callback's own; notes its files there."""
        where = self.backup_dir
        if os.path.islink(where):
            raise ValueError(f"`backup_dir` {where!r} is a symbolic link; the checkpoint "
                             "deletes its old files there, so it must be a directory of its "
                             "own, not a link to another.")
        if not os.path.lexists(where):
            return
        if not os.path.isdir(where):
            raise ValueError(f"`backup_dir` {where!r} exists and is not a directory.")
        names = os.listdir(where)
        # A link under its own name would have a save write through it.
        foreign = sorted(name for name in names if not _OWN_NAME.fullmatch(name)
                         and name not in self.shared_files
                         or os.path.islink(os.path.join(where, name)))
        if foreign:
            raise ValueError(f"`backup_dir` {where!r} holds files the checkpoint did not write "
                             f"({foreign[:3]}); it deletes its old files there, so give it a "
                             "directory of its own.")
        self._own.update(names)
        self._own.difference_update(self.shared_files)

    def state(self):
        """The saved state, or None when there is no checkpoint yet.

        Returns:
            None, or a dict with the completed `epoch`, the `weights` file
            name and its full `weights_path`, the `history` of the finished
            epochs, the `fingerprint`, and the seed generators' states.

        Raises:
            ValueError: when `state.json` cannot be read, names a missing
                weights file, or holds another fingerprint; when
                `backup_dir` is a symbolic link, not a directory, or holds
                files the callback did not write.
        """
        self._check_directory()
        if not os.path.exists(self._state_path):
            return None
        try:
            with open(self._state_path, encoding="utf-8") as stream:
                state = json.load(stream)
            epoch, weights = int(state["epoch"]), str(state["weights"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"The checkpoint {self._state_path!r} cannot be read ({error}); "
                             f"delete {self.backup_dir!r} to start the run over.") from None
        path = os.path.join(self.backup_dir, os.path.basename(weights))
        if epoch < 0 or not os.path.isfile(path):
            raise ValueError(f"The checkpoint in {self.backup_dir!r} names a missing weights "
                             f"file {weights!r}; delete the directory to start the run over.")
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"The checkpoint in {self.backup_dir} was made with other data/arguments "
                f"(differs in: {_difference(state.get('fingerprint'), self.fingerprint)}); "
                f"rerun with the same ones to resume it, or use a new directory or delete "
                f"{self.backup_dir}.")
        state["weights_path"] = path
        return state

    def restored_epoch(self):
        """Epochs already completed according to the checkpoint.

        Returns:
            An int, 0 when there is no checkpoint.
        """
        state = self.state()
        return 0 if state is None else int(state["epoch"])

    def merged_history(self, history):
        """Logs of all epochs: the checkpoint's (before a resume) + `history`.

        Args:
            history: the `History.history` dict of the `fit` that resumed
                (or ran from the start).

        Returns:
            A dict from log key to a list of floats, one per epoch since the
            first epoch of the run.
        """
        merged = {key: list(values) for key, values in self._restored_history.items()}
        for key, values in history.items():
            merged.setdefault(key, []).extend(float(v) for v in values)
        return merged

    def restore(self, model):
        """Loads the checkpoint (if any) into `model`; returns the epochs it completed.

        What `fit` does through `on_train_begin`; call it directly when the
        checkpoint already holds every planned epoch (nothing left to fit).

        Args:
            model: the built `keras.Model` the checkpoint was written from
                (same architecture and fingerprint).

        Returns:
            The number of epochs the checkpoint completed (0 if none).
        """
        self.set_model(model)
        self.on_train_begin()
        return self.restored_epoch()

    # --- the callback -----------------------------------------------------
    def on_train_begin(self, logs=None):
        if not self.model.built:
            raise ValueError("AtomicBackupAndRestore needs a built model; call it on a batch "
                             "or build it before fit().")
        state = self.state()
        self._history = {}
        self._restored_history = {}
        self._last_save = time.monotonic()
        if state is None:
            return
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        try:
            self.model.load_weights(state["weights_path"])
        except (OSError, ValueError) as error:
            raise ValueError(f"The checkpoint {state['weights_path']!r} does not fit this "
                             f"model ({error}); delete {self.backup_dir!r} to start the run "
                             "over.") from None
        generators = seed_states(self.model)
        saved = state.get("seed_states", [])
        # Matched by position: generator names are numbered per process
        # (seed_generator_4 here may be seed_generator_0 in the saved run).
        if len(saved) != len(generators):
            raise ValueError(f"The checkpoint in {self.backup_dir!r} has {len(saved)} noise "
                             f"generator states, the model {len(generators)}; delete the "
                             "directory to start the run over.")
        for variable, (_, value) in zip(generators, saved):
            variable.assign(value)
        self._restored_history = {key: [float(v) for v in values]
                                  for key, values in state.get("history", {}).items()}
        self._history = {key: list(values) for key, values in self._restored_history.items()}
        # What Keras' own callback sets: fit() starts at this epoch.
        _keras_internals.set_initial_epoch(self.model, state["epoch"])

    def on_train_batch_end(self, batch, logs=None):
        pass  # epoch-end checkpoints only

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self._history.setdefault(key, []).append(float(value))
        last = epoch + 1 == (self.params or {}).get("epochs")
        if (self.save_interval == 0 or last
                or time.monotonic() - self._last_save >= self.save_interval):
            self._save(epoch + 1)
            self._last_save = time.monotonic()

    def _save(self, epoch):
        name = f"epoch-{epoch}.weights.h5"
        path = os.path.join(self.backup_dir, name)
        partial = os.path.join(self.backup_dir, f"partial-{epoch}.weights.h5")
        partial_state = f"{self._state_path}.partial"
        state = {"epoch": epoch, "weights": name, "history": self._history,
                 "fingerprint": self.fingerprint,
                 "seed_states": [[v.path, [int(s) for s in v.numpy().ravel()]]
                                 for v in seed_states(self.model)]}
        weights = weights_bytes(self.model)
        committed = False
        try:
            os.makedirs(self.backup_dir, exist_ok=True)
            self._own.update((os.path.basename(partial), name))
            _write_durably(partial, weights)
            os.replace(partial, path)
            self._own.update((os.path.basename(partial_state), STATE))
            _write_durably(partial_state, json.dumps(state, allow_nan=True).encode())
            os.replace(partial_state, self._state_path)
            committed = True
            for other in sorted(self._own - {name, STATE}):
                _remove(os.path.join(self.backup_dir, other))
            self._own &= {name, STATE}
        except OSError as error:
            # Whatever was half-written goes; state.json still names the last
            # complete checkpoint (or this one, if it got that far).
            for leftover in (partial, partial_state) + (() if committed else (path,)):
                _remove(leftover)
            kept = (f"the last complete checkpoint in {self.backup_dir} is kept"
                    if os.path.exists(self._state_path) else "there is no earlier checkpoint")
            raise OSError(error.errno, f"Cannot write the checkpoint of epoch {epoch}: "
                          f"{error.strerror or error}; {kept}. Free space or fix permissions, "
                          "then rerun to resume", error.filename) from None

    def on_train_end(self, logs=None):
        if not self.delete_checkpoint or os.path.islink(self.backup_dir):
            return
        for name in sorted(self._own):  # only its own files; the directory if then empty
            _remove(os.path.join(self.backup_dir, name))
        self._own.clear()
        try:
            os.rmdir(self.backup_dir)
        except OSError:  # absent, or holding files that are not the checkpoint's
            pass


def _difference(saved, current):
    """The keys in which two fingerprints differ, with short values shown."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if keys:
            parts = []
            for key in keys:
                then, now = repr(saved.get(key)), repr(current.get(key))
                short = len(then) + len(now) <= 60
                parts.append(f"{key} ({then} then, {now} now)" if short else str(key))
            return ", ".join(parts)
    then, now = repr(saved), repr(current)
    return f"everything ({then[:60]} then, {now[:60]} now)"

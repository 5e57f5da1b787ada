"""Whose files a run directory holds, and which process is writing it.

The zoo never deletes or replaces a file it did not create. A directory is a
zoo run directory only if the zoo created it, or took it over while it was
empty: the first file it writes there is the marker `.zoo-run` (JSON: what
created the directory and every name the zoo has put into it; a name is
added before its file is moved in). Later runs refuse a non-empty directory
without the marker, and a name present that the marker does not list; the
zoo replaces or removes only listed names.

One `python -m zoo train` at a time per directory: `.zoo-run.lock` is
`flock`ed for the whole run and holds the pid of its holder. The kernel drops
the lock when the process ends, however it ends (SIGKILL too), so a stale
lock file is harmless. A clean exit removes the lock file.

Example:
>>> import tempfile
>>> out = os.path.join(tempfile.mkdtemp(), "run")
>>> check(out) == out                 # read-only: refuses early, writes nothing
True
>>> directory = claim(out)            # creates, locks, writes the marker
>>> staged_file = os.path.join(os.path.dirname(out), "staged.keras")
>>> _ = open(staged_file, "w").write("weights")
>>> try:
...     directory.move_in(staged_file, "model.keras")
... finally:
...     directory.release()
>>> read_marker(out)
['model.keras']
"""

import errno
import fcntl
import json
import os
import shutil

from zoo.models.limits import printable
from zoo.models.limits import shown
from zoo.run import flags

MARKER = ".zoo-run"
LOCK = ".zoo-run.lock"
_MARKER_TMP = MARKER + ".tmp"
# Names the zoo manages without listing them: its own bookkeeping, and the
# directory of a multi-worker run's other workers (each has its own marker).
WORKERS = ".workers"
_UNLISTED = (MARKER, LOCK, _MARKER_TMP)
CREATED_BY = "python -m zoo train"


def _entries(path, ignore=()):
    try:
        return sorted(set(os.listdir(path)) - set(_UNLISTED) - set(ignore))
    except FileNotFoundError:
        return []


def read_marker(path):
    """The names the marker of `path` lists, or None when there is no marker."""
    marker = os.path.join(path, MARKER)
    if not os.path.lexists(marker):
        return None
    try:
        with open(marker, encoding="utf-8") as stream:
            payload = json.load(stream)
        files = payload["files"]
        if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            raise TypeError("'files' is not a list of names")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{marker} is damaged ({error}); the zoo cannot tell which files in "
                         f"{path!r} are its own: use another --out.") from None
    return files


def _holder(path):
    try:
        with open(os.path.join(path, LOCK), encoding="utf-8") as stream:
            pid = stream.read().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "pid unknown"


def _in_use(path):
    return ValueError(f"--out {path!r} is in use by another `{CREATED_BY}` ({_holder(path)}); "
                      "wait for it to finish or use another --out.")


def _is_locked(path):
    """Whether another process holds the lock of `path` (read-only probe)."""
    try:
        fd = os.open(os.path.join(path, LOCK), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def check(path, finished="results.json", ignore=(WORKERS,)):
    """Refuses `path` as a run directory, or returns its absolute path. Writes nothing.

    Refused (ValueError, one line): a path that is not UTF-8 (TensorFlow
    cannot write under it); a file that is not a directory; a directory
    another `train` holds; one with a finished run (`finished` exists); a
    non-empty one without the marker; one with names the marker does not
    list, or a symbolic link under a listed name. `ignore`: names that
    never count (the workers' directory).
    """
    path = os.path.abspath(os.fspath(path))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # the bytes of a non-UTF-8 name (PEP 383)
        raise ValueError(f"--out '{printable(path)}' is not a UTF-8 name; TensorFlow writes "
                         "the model's files only under UTF-8 paths: choose another --out.") \
            from None
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"--out {path!r} exists and is not a directory.")
    if not os.path.isdir(path):
        return path
    if _is_locked(path):
        raise _in_use(path)
    check_contents(path, finished, ignore)
    return path


def check_contents(path, finished="results.json", ignore=(WORKERS,)):
    """Returns the marker's list (None without one) or refuses the directory's contents."""
    if finished and os.path.lexists(os.path.join(path, finished)):
        raise ValueError(f"--out {path!r} already holds a finished run ({finished}); "
                         "choose another directory or delete it.")
    present = _entries(path, ignore)
    listed = read_marker(path)
    if listed is None and present:
        raise ValueError(f"--out {path!r} is not empty and not a zoo run directory (found "
                         f"{present[:3]}); the zoo never replaces files it did not write: "
                         "choose an empty or new directory.")
    foreign = [name for name in present if name not in (listed or [])]
    if foreign:
        raise ValueError(f"--out {path!r} holds files the zoo did not write ({foreign[:3]}); "
                         "move them away or choose another directory.")
    # The zoo makes no symbolic links: one under a listed name was put there
    # by someone else, and following it would write or delete outside `path`.
    linked = [name for name in present if os.path.islink(os.path.join(path, name))]
    if linked:
        raise ValueError(f"--out {path!r}: {linked[0]!r} is a symbolic link the zoo did not "
                         "make; the zoo does not follow links out of its run directory: "
                         "remove the link or choose another directory.")
    return listed


class RunDirectory:
    """A claimed run directory: locked by this process, with the zoo's marker.

    Attributes:
        path: the absolute directory path.
        created: whether this process created the directory.
    """

    def __init__(self, path, created, fd):
        self.path, self.created, self._fd = path, created, fd

    def listed(self):
        return read_marker(self.path) or []

    def _write_marker(self, files):
        payload = {"created_by": CREATED_BY, "files": sorted(set(files))}
        temporary = os.path.join(self.path, _MARKER_TMP)
        try:
            with open(temporary, "w", encoding="utf-8") as stream:
                json.dump(payload, stream, indent=2)
                stream.write("\n")
            os.replace(temporary, os.path.join(self.path, MARKER))
        except OSError as error:
            _remove(temporary)
            if error.filename:
                raise
            # A failed write() names no file; the message must.
            raise OSError(error.errno, error.strerror, os.path.join(self.path, MARKER)) \
                from None

    def add(self, name):
        """Lists `name` as the zoo's (before the zoo writes it)."""
        files = self.listed()
        if name not in files:
            self._write_marker(files + [name])

    def owns(self, name):
        return name in self.listed()

    def _refuse_foreign(self, name):
        if os.path.lexists(os.path.join(self.path, name)) and not self.owns(name):
            raise ValueError(f"{os.path.join(self.path, name)} was not written by the zoo; "
                             "refusing to replace it.")

    def move_in(self, source, name):
        """Moves `source` to `path/name`, replacing only a file the zoo listed."""
        self._refuse_foreign(name)
        self.add(name)
        target = os.path.join(self.path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.replace(source, target)

    def remove(self, name, owned=None):
        """Deletes `path/name` if the zoo listed it, then unlists it.

        `owned`: for a directory, a predicate on the names in it that the
        zoo wrote; only those are deleted, and the directory once empty (a
        file someone put there keeps it, and it stays listed).
        """
        files = self.listed()
        if name not in files:
            return
        target = os.path.join(self.path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            if owned is None:
                shutil.rmtree(target, ignore_errors=True)
            else:
                for entry in os.listdir(target):
                    if owned(entry) and not os.path.isdir(os.path.join(target, entry)):
                        _remove(os.path.join(target, entry))
                try:
                    os.rmdir(target)
                except OSError:
                    pass
        else:
            _remove(target)
        if not os.path.lexists(target):
            self._write_marker([f for f in files if f != name])

    def release(self, discard_if_empty=False):
        """Unlocks. With `discard_if_empty`, a directory left holding nothing of the
        zoo's but the marker goes back to how it was: empty, or absent if this
        process created it."""
        if self._fd is None:
            return
        if discard_if_empty:
            try:
                for name in self.listed():  # empty leftovers: a .backup never written to
                    target = os.path.join(self.path, name)
                    if os.path.isdir(target) and not os.listdir(target):
                        self.remove(name)
                if not _entries(self.path):
                    _remove(os.path.join(self.path, MARKER))
            except (OSError, ValueError):
                pass  # best effort: never hide the error that ended the run
        # Unlinked while still locked: a process that opened the old file
        # notices (claim compares inodes) and retries on a fresh one.
        _remove(os.path.join(self.path, LOCK))
        os.close(self._fd)
        self._fd = None
        if discard_if_empty and self.created:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _lock(path):
    """The fd of `path/LOCK`, flocked; ValueError naming the holder if taken."""
    lock = os.path.join(path, LOCK)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _in_use(path) from None
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed it as we opened it: lock the new one


def claim(path, finished="results.json", ignore=(WORKERS,)):
    """Creates `path` if needed, locks it and marks it as the zoo's; a `RunDirectory`.

    Checks as `check` does, before and again under the lock. A directory
    that cannot be created or written is a ValueError that says so.
    """
    path = check(path, finished, ignore)
    created = not os.path.isdir(path)
    try:
        os.makedirs(path, exist_ok=True)
        fd = _lock(path)
    except OSError as error:
        raise ValueError(f"--out {path!r} cannot be written: {error.strerror or error} "
                         f"({error.filename or path}).") from None
    directory = RunDirectory(path, created, fd)
    try:
        listed = check_contents(path, finished, ignore)  # again, now that we hold it
        if listed is None:
            directory._write_marker([])
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException as error:
        directory.release(discard_if_empty=True)
        if isinstance(error, OSError):
            raise ValueError(f"--out {path!r} cannot be written: {error.strerror or error} "
                             f"({error.filename or path}).") from None
        raise
    return directory


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is corrupted: not valid JSON ({error}).") from None
    except RecursionError:
        raise ValueError(f"{path} is corrupted: its JSON is nested too deeply for a zoo "
                         "run's file.") from None


def missing_run_files(run_path, names):
    """Why `run_path` cannot be a finished run: None, or one line naming what is wrong.

    A file, not a directory, says so; a name that is a symbolic link loop
    or a link to nothing is told apart from an absent file.
    """
    if os.path.lexists(run_path) and not os.path.isdir(run_path):
        return f"{run_path!r} is not a directory (a zoo run is a directory)"
    absent, links = [], []
    for name in names:
        path = os.path.join(run_path, name)
        if os.path.exists(path):
            continue
        try:
            os.stat(path)
        except OSError as error:
            if os.path.islink(path):
                links.append(f"{name} is a symbolic link loop" if error.errno == errno.ELOOP
                             else f"{name} is a symbolic link to nothing")
                continue
        absent.append(name)
    wrong = ([f"missing {absent}"] if absent else []) + links
    return f"{run_path!r} is not a finished zoo run: {'; '.join(wrong)}" if wrong else None


def _count(value, low, high=None):
    return (not isinstance(value, bool) and isinstance(value, int) and value >= low
            and (high is None or value <= high))


def read_run(config_path, results_path):
    """(config, stored results) of a run, checked; ValueError naming the bad file."""
    from tfp_bnn.predict.limits import MAX_NUM_SAMPLES  # noqa: PLC0415

    config, stored = _read_json(config_path), _read_json(results_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} is not a zoo run configuration (a JSON "
                         f"{type(config).__name__}, not an object).")
    absent = [key for key in ("dataset", "split", "seed", "num_samples") if key not in config]
    if absent:
        raise ValueError(f"{config_path} is not a zoo run configuration "
                         f"(missing {absent}).")
    # The ranges of --split and --seed: a larger seed would pick another
    # split of the data, one that may mix training rows into the test set.
    checks = {"dataset": isinstance(config["dataset"], str) and config["dataset"] != "",
              "split": _count(config["split"], 0, flags.MAX_SPLIT),
              "seed": _count(config["seed"], 0, flags.MAX_SEED),
              "num_samples": _count(config["num_samples"], 1, MAX_NUM_SAMPLES)}
    wrong = [key for key, good in checks.items() if not good]
    if wrong:
        raise ValueError(f"{config_path} is damaged: " + ", ".join(
            f"{key} is {shown(config[key])}" for key in wrong) + " (dataset must be a name or "
            f"path, split an int in 0..{flags.MAX_SPLIT:,}, seed an int in "
            f"0..{flags.MAX_SEED:,} as --seed takes, num_samples an int in "
            f"1..{MAX_NUM_SAMPLES:,}).")
    if not isinstance(stored, dict):
        raise ValueError(f"{results_path} is not a zoo run's results (a JSON "
                         f"{type(stored).__name__}, not an object).")
    wrong = [key for key in ("rmse", "log_likelihood", "coverage_95", "accuracy", "nll", "ece",
                             "brier") if key in stored
             and (isinstance(stored[key], bool) or not isinstance(stored[key], (int, float)))]
    if wrong:
        raise ValueError(f"{results_path} is damaged: {', '.join(wrong)} "
                         "must be numbers.")
    return config, stored


def read_preprocessing(path):
    """A run's preprocessing.json (its scaling statistics) checked, or None when the run has
    none (a run from before the zoo exported models that take raw inputs)."""
    if not os.path.lexists(path):
        return None
    statistics = _read_json(path)
    keys = ("x_mean", "x_std", "y_mean", "y_std")
    if not isinstance(statistics, dict) or any(key not in statistics for key in keys):
        raise ValueError(f"{path} is damaged: it must be a JSON object with {list(keys)}.")
    return statistics

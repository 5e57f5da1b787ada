"""Loading saved models, with errors that say what is wrong with the file.

`keras.saving.load_model` and `tf.saved_model.load` report a damaged file
in their own terms: "File not found" for an empty or truncated `.keras`
file that exists, a `KeyError` for an archive without its config, a
protobuf parse error or a `TensorSliceReader` failure for a SavedModel
whose files were damaged or not all copied; a decompression bomb costs
gigabytes before Keras' 4 GiB guard, a FIFO blocks forever. The two loaders
here check the file first (its type by `stat`, a zip's declared sizes before
reading any member, see `tfp_bnn._keras_archive`) and turn every failure
into a `ValueError` that names the path and the problem; the original
exception stays attached as `__cause__`.

- `load_model(path)`: a `.keras` file written by `model.save` (tfp_bnn's
  layers, priors and posteriors are registered, so `safe_mode=True` works).
- `load_predictive(path)`: a SavedModel directory written by
  `tfp_bnn.export.export_predictive` or `export_saved_model` (or
  `model.export`), with its `serve` endpoint.

Example:
>>> import os, tempfile
>>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
>>> x = np.random.rand(2, 4).astype("float32")
>>> directory = tempfile.mkdtemp()
>>> model.save(os.path.join(directory, "model.keras"))
>>> again = tfp_bnn.load_model(os.path.join(directory, "model.keras"))
>>> again.layers[0].kernel_posterior.event_shape
TensorShape([4, 3])

`load_predictive`'s example loads what `tfp_bnn.export.export_predictive` wrote.
"""

import os
import re
import stat
import zipfile

import keras
from tfp_bnn import _tf
from tfp_bnn._tf import tf

from tfp_bnn._keras_archive import check_keras_archive
from tfp_bnn._keras_archive import file_kind
from tfp_bnn._keras_archive import mib

_UNKNOWN_CLASS = re.compile(r"Could not locate (?:class|function) '([^']+)'")
# What the loaders raise for a damaged or foreign file (anything else is a bug);
# h5py raises RuntimeError for a damaged HDF5 heap or symbol table and
# OverflowError for a forged size; RecursionError is a RuntimeError.
_LOAD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OSError,
                EOFError, RuntimeError, OverflowError, zipfile.BadZipFile)


def _load_errors():
    """`_LOAD_ERRORS`, with TensorFlow's op errors where TensorFlow is loaded (a
    process that never imported it cannot have raised one)."""
    if _tf.loaded():
        return _LOAD_ERRORS + (tf.errors.OpError,)
    return _LOAD_ERRORS
# protobuf refuses messages over 2 GiB.
MAX_GRAPH_BYTES = 2**31 - 1


def _stat(path, shown):
    """os.stat(path), with a one-line ValueError about `shown` if it cannot be read."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        dangling = " (a symbolic link to a missing target)" if os.path.islink(path) else ""
        raise ValueError(f"Cannot load {shown!r}: no such file or directory{dangling}.") \
            from None
    except (OSError, ValueError) as error:  # ELOOP, EACCES, ENAMETOOLONG, NUL in the path
        reason = getattr(error, "strerror", None) or str(error)
        raise ValueError(f"Cannot load {shown!r}: {reason}.") from error


def _check_path(path, what):
    if not isinstance(path, (str, bytes, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{what} needs a non-empty str or path, got {path!r}.")
    path = os.fsdecode(path)
    return path, _stat(path, path)


def _innermost(error):
    """The first line of the deepest exception in the cause/context chain."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    return f"{type(error).__name__}: {_first_line(error)}"


def _first_line(error, limit=300):
    """The first line of an error's message, cut at `limit` characters (a config's repr).

    A first line ending in ':' announces what follows, so the next non-empty
    line is kept with it: Keras before 3.15 reports unreadable weights as 'A
    total of N objects could not be loaded. Example error message for object
    <...>:' with the error itself two lines down.
    """
    text = [line for line in str(error).strip().splitlines() if line.strip()]
    line = text[0] if text else ""
    if line.endswith(":") and len(text) > 1:
        line = f"{line} {text[1].strip()}"
    return line if len(line) <= limit else line[:limit] + "..."


def _describe_keras_error(path, error):
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    for item in chain:
        match = _UNKNOWN_CLASS.search(str(item))
        if match:
            return (f"Cannot load {path!r}: its config names an unknown class "
                    f"{match.group(1)!r} (saved by another version, or a custom class whose "
                    "module was not imported).")
    for item in chain:
        if "safe_mode" in str(item):
            return (f"Cannot load {path!r} with safe_mode=True: "
                    f"{_first_line(item)}")
    return f"Cannot load {path!r}: {_innermost(chain[0])}"


def load_model(path, safe_mode=True, compile=True):
    """Loads a `.keras` model file, with a clear error for a bad file.

    Wraps `keras.saving.load_model`; tfp_bnn's layers, priors, posteriors,
    losses and metrics are registered by importing tfp_bnn.

    Args:
        path: a `.keras` file written by `model.save`.
        safe_mode: refuse to deserialize Python lambdas (keep True for files
            you did not write).
        compile: restore the optimizer, loss and metrics as saved.

    Returns:
        The `keras.Model`.

    Raises:
        ValueError: naming the path and the problem: missing, a directory,
            not a regular file (FIFO, device, symlink loop), not `.keras`,
            empty, not a zip (truncated or random bytes), members over the
            size or compression-ratio limits, forged or duplicate entries,
            a corrupted member, no or invalid config.json (not an object,
            nested over 512 levels), a config naming an unknown class,
            unsafe content under safe_mode, unreadable weights. The
            original error is the `__cause__`.

    Example:
    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> x = np.random.rand(2, 4).astype("float32")
    >>> path = os.path.join(tempfile.mkdtemp(), "bnn.keras")
    >>> model.save(path)
    >>> again = tfp_bnn.load_model(path)
    >>> with tfp_bnn.mean_mode(model), tfp_bnn.mean_mode(again):
    ...     print(np.allclose(model(x), again(x)))
    True
    """
    path, info = _check_path(path, "load_model")
    check_keras_archive(path, info.st_mode)
    try:
        return keras.saving.load_model(path, safe_mode=bool(safe_mode), compile=bool(compile))
    except _load_errors() as error:
        raise ValueError(_describe_keras_error(path, error)) from error


def _savedmodel_files(path):
    """{relative name: stat} of the files TensorFlow may read in a SavedModel directory."""
    files = {}
    for folder in ("", "variables", "assets"):
        where = os.path.join(path, folder)
        if folder and not os.path.isdir(where):
            continue
        try:
            entries = list(os.scandir(where))
        except OSError as error:
            raise ValueError(f"Cannot load {path!r}: its {folder or 'directory'} cannot be "
                             f"listed ({error.strerror or error}).") from error
        for entry in entries:
            name = f"{folder}/{entry.name}" if folder else entry.name
            try:
                files[name] = os.stat(entry.path)
            except OSError as error:
                raise ValueError(f"Cannot load {path!r}: {name} cannot be read "
                                 f"({error.strerror or error}).") from error
    return files


def _check_savedmodel_files(path):
    """Checks the SavedModel's files before TensorFlow opens them.

    Every file must be a regular file (TensorFlow blocks forever reading a
    FIFO), saved_model.pb and the variables' index and data shards non-empty.
    """
    files = _savedmodel_files(path)
    if "saved_model.pb" not in files:
        raise ValueError(f"Cannot load {path!r}: not a SavedModel directory (it has no "
                         "saved_model.pb).")
    for name, info in files.items():
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise ValueError(f"Cannot load {path!r}: {name} is {file_kind(info.st_mode)}, not a "
                             "regular file.")
    graph = files["saved_model.pb"]
    if not stat.S_ISREG(graph.st_mode):
        raise ValueError(f"Cannot load {path!r}: saved_model.pb is a directory, not a file.")
    if graph.st_size == 0:
        raise ValueError(f"Cannot load {path!r}: saved_model.pb is empty (0 bytes).")
    if graph.st_size > MAX_GRAPH_BYTES:
        raise ValueError(f"Cannot load {path!r}: saved_model.pb has {mib(graph.st_size)}, "
                         "over protobuf's 2 GiB limit.")
    # TensorFlow writes the variables' index even for a model without variables.
    index = files.get("variables/variables.index")
    if index is None or not stat.S_ISREG(index.st_mode):
        raise ValueError(f"Cannot load {path!r}: variables/variables.index is missing (the "
                         "variables/ folder was removed or not copied with saved_model.pb).")
    for name, info in sorted(files.items()):
        if (name == "variables/variables.index" or name.startswith("variables/variables.data-")
                ) and info.st_size == 0:
            raise ValueError(f"Cannot load {path!r}: {name} is empty (0 bytes; truncated or "
                             "not copied completely).")


def load_predictive(path):
    """Loads a SavedModel directory written by `tfp_bnn.export`, with clear errors.

    Wraps `tf.saved_model.load`. The result serves without tfp_bnn:
    `served.serve(x, num_samples)` for `export_predictive`, `serve(x)` and
    `serve_mean(x)` for `export_saved_model`.

    Args:
        path: the SavedModel directory.

    Returns:
        The loaded object (a trackable with the `serve` endpoint).

    Raises:
        ValueError: naming the path and the problem: missing, a file, not a
            SavedModel (no saved_model.pb), a FIFO or device among its
            files, an empty or corrupted saved_model.pb, a missing, empty,
            truncated or damaged variables/ file, no `serve` endpoint. The
            original error is the `__cause__`.

    Example:
    >>> import os, tempfile
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> x = np.random.rand(2, 4).astype("float32")
    >>> path = os.path.join(tempfile.mkdtemp(), "bnn_predictive")
    >>> path = tfp_bnn.export.export_predictive(model, path, output="mean", noise_variance=0.1)
    >>> served = tfp_bnn.load_predictive(path)
    >>> sorted(served.serve(x, tf.constant(50)))
    ['aleatoric_variance', 'epistemic_variance', 'mean', 'stddev']
    """
    path, info = _check_path(path, "load_predictive")
    if not stat.S_ISDIR(info.st_mode):
        hint = " (a .keras file: load it with tfp_bnn.load_model)" if path.endswith(
            ".keras") else ""
        kind = "a file" if stat.S_ISREG(info.st_mode) else file_kind(info.st_mode)
        raise ValueError(f"Cannot load {path!r}: it is {kind}, not a SavedModel "
                         f"directory{hint}.")
    _check_savedmodel_files(path)
    try:
        loaded = tf.saved_model.load(path)
    except IndexError as error:  # the checkpoint reader's "Read less bytes than requested"
        raise ValueError(f"Cannot load the SavedModel {path!r}: a variables/ data file is "
                         f"shorter than variables.index says (truncated; {error}).") from error
    except _load_errors() as error:
        raise ValueError(f"Cannot load the SavedModel {path!r}: it is corrupted or "
                         f"incomplete ({_innermost(error)})") from error
    if not hasattr(loaded, "serve"):
        raise ValueError(f"Cannot load {path!r}: the SavedModel has no `serve` endpoint (not "
                         "written by tfp_bnn.export or model.export).")
    return loaded

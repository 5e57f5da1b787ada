"""Loading saved models, with errors that say what is wrong with the file.

`keras.saving.load_model` and `tf.saved_model.load` report a damaged file
in their own terms: "File not found" for an empty or truncated `.keras`
file that exists, a `KeyError` for an archive without its config, a
protobuf parse error or a `TensorSliceReader` failure for a SavedModel
whose files were damaged or not all copied. The two loaders here check the
file first and turn every failure into a `ValueError` that names the path
and the problem; the original exception stays attached as `__cause__`.

- `load_model(path)`: a `.keras` file written by `model.save` (tfp_bnn's
  layers, priors and posteriors are registered, so `safe_mode=True` works).
- `load_predictive(path)`: a SavedModel directory written by
  `tfp_bnn.export.export_predictive` or `export_saved_model` (or
  `model.export`), with its `serve` endpoint.

Example:
>>> model = tfp_bnn.load_model("runs/lenet/model.keras")
>>> served = tfp_bnn.load_predictive("runs/lenet/predictive")
>>> served.serve(x, tf.constant(100))["probabilities"]
"""

import json
import os
import re
import zipfile

import keras
import tensorflow as tf

_UNKNOWN_CLASS = re.compile(r"Could not locate (?:class|function) '([^']+)'")
# What the loaders raise for a damaged or foreign file (anything else is a bug).
_LOAD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OSError, EOFError,
                zipfile.BadZipFile, tf.errors.OpError)


def _check_path(path, what):
    if not isinstance(path, (str, bytes, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{what} needs a non-empty str or path, got {path!r}.")
    path = os.fsdecode(path)
    if not os.path.exists(path):
        raise ValueError(f"Cannot load {path!r}: no such file or directory.")
    return path


def _innermost(error):
    """The first line of the deepest exception in the cause/context chain."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


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
                    f"{str(item).strip().splitlines()[0]}")
    return f"Cannot load {path!r}: {_innermost(chain[0])}"


def _check_keras_archive(path):
    """Checks that `path` is an intact .keras zip with a JSON config.json."""
    if os.path.isdir(path):
        hint = (" (a SavedModel directory: load it with tfp_bnn.load_predictive)"
                if os.path.isfile(os.path.join(path, "saved_model.pb")) else "")
        raise ValueError(f"Cannot load {path!r}: it is a directory, not a .keras file{hint}.")
    if not path.endswith(".keras"):
        raise ValueError(f"Cannot load {path!r}: expected a .keras file (written by "
                         "model.save('name.keras')), got the extension "
                         f"{os.path.splitext(path)[1] or '(none)'!r}.")
    if os.path.getsize(path) == 0:
        raise ValueError(f"Cannot load {path!r}: the file is empty (0 bytes).")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"Cannot load {path!r}: not a zip archive, so not a .keras file "
                         "(truncated, corrupted or another format).")
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
            if broken is not None:
                raise ValueError(f"Cannot load {path!r}: the archive member {broken!r} is "
                                 "corrupted (CRC check failed).")
            if "config.json" not in archive.namelist():
                raise ValueError(f"Cannot load {path!r}: the archive has no config.json, so "
                                 "it is not a Keras model file.")
            config = archive.read("config.json")
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise ValueError(f"Cannot load {path!r}: the zip archive is damaged "
                         f"({error}).") from error
    try:
        json.loads(config)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot load {path!r}: config.json is not valid JSON "
                         f"({error}).") from error


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
            not `.keras`, empty, not a zip (truncated or random bytes), a
            corrupted member, no or invalid config.json, a config naming an
            unknown class, unsafe content under safe_mode, unreadable
            weights. The original error is the `__cause__`.

    Example:
    >>> model.save("bnn.keras")
    >>> again = tfp_bnn.load_model("bnn.keras")
    """
    path = _check_path(path, "load_model")
    _check_keras_archive(path)
    try:
        return keras.saving.load_model(path, safe_mode=bool(safe_mode), compile=bool(compile))
    except _LOAD_ERRORS as error:
        raise ValueError(_describe_keras_error(path, error)) from error


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
            SavedModel (no saved_model.pb), an empty or corrupted
            saved_model.pb, a missing or damaged variables/ folder, no
            `serve` endpoint. The original error is the `__cause__`.

    Example:
    >>> tfp_bnn.export.export_predictive(model, "bnn_predictive")
    >>> served = tfp_bnn.load_predictive("bnn_predictive")
    """
    path = _check_path(path, "load_predictive")
    if not os.path.isdir(path):
        hint = " (a .keras file: load it with tfp_bnn.load_model)" if path.endswith(
            ".keras") else ""
        raise ValueError(f"Cannot load {path!r}: it is a file, not a SavedModel "
                         f"directory{hint}.")
    graph = os.path.join(path, "saved_model.pb")
    if not os.path.isfile(graph):
        raise ValueError(f"Cannot load {path!r}: not a SavedModel directory (it has no "
                         "saved_model.pb).")
    if os.path.getsize(graph) == 0:
        raise ValueError(f"Cannot load {path!r}: saved_model.pb is empty (0 bytes).")
    # TensorFlow writes the variables' index even for a model without variables.
    if not os.path.isfile(os.path.join(path, "variables", "variables.index")):
        raise ValueError(f"Cannot load {path!r}: variables/variables.index is missing (the "
                         "variables/ folder was removed or not copied with saved_model.pb).")
    try:
        loaded = tf.saved_model.load(path)
    except _LOAD_ERRORS as error:
        raise ValueError(f"Cannot load the SavedModel {path!r}: it is corrupted or "
                         f"incomplete ({_innermost(error)})") from error
    if not hasattr(loaded, "serve"):
        raise ValueError(f"Cannot load {path!r}: the SavedModel has no `serve` endpoint (not "
                         "written by tfp_bnn.export or model.export).")
    return loaded

"""Loading saved models, with errors that say what is wrong with the file.

`keras.saving.load_model` and `tf.saved_model.load` report a damaged file
in their own terms: "File not found" for an empty or truncated `.keras`
file that exists, a `KeyError` for an archive without its config, a
protobuf parse error or a `TensorSliceReader` failure for a SavedModel
whose files were damaged or not all copied; a decompression bomb costs
gigabytes before Keras' 4 GiB guard, a FIFO blocks forever. The two loaders
here check the file first (its type by `stat`, a zip's declared sizes before
reading any member, see `MAX_CONFIG_BYTES` and below) and turn every failure
into a `ValueError` that names the path and the problem; the original
exception stays attached as `__cause__`.

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
import stat
import zipfile

import keras
import tensorflow as tf

from tfp_bnn._memory import memory_bytes

_UNKNOWN_CLASS = re.compile(r"Could not locate (?:class|function) '([^']+)'")
# What the loaders raise for a damaged or foreign file (anything else is a bug);
# h5py raises RuntimeError for a damaged HDF5 heap or symbol table and
# OverflowError for a forged size; RecursionError is a RuntimeError.
_LOAD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OSError,
                EOFError, RuntimeError, OverflowError, zipfile.BadZipFile, tf.errors.OpError)

_MiB = 2**20
# Limits on a .keras archive, checked on its zip directory before any member
# is read. Keras writes config.json (the model's JSON: kilobytes, a few MiB
# for a huge model), metadata.json (~100 bytes) and model.weights.h5, all
# stored uncompressed.
MAX_CONFIG_BYTES = 64 * _MiB
MAX_METADATA_BYTES = _MiB
MAX_MEMBERS = 10_000
# A member that inflates over MAX_EXPANSION times its stored size is refused
# above a floor (1 MiB; the weights 256 MiB, as Keras' own extraction guard):
# stored members have ratio 1, DEFLATE tops out near 1032:1, so only a
# decompression bomb gets there. Keras refuses a member only above 4 GiB.
MAX_EXPANSION = 100
_EXPANSION_FLOOR = {"model.weights.h5": 256 * _MiB}
# Deeper JSON than this is refused: Keras deserializes configs recursively.
MAX_JSON_DEPTH = 512
# protobuf refuses messages over 2 GiB.
MAX_GRAPH_BYTES = 2**31 - 1
_READ_CHUNK = _MiB


def _kind(mode):
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


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
    """The first line of an error's message, cut at `limit` characters (a config's repr)."""
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
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


def _mib(size):
    return f"{size / _MiB:,.1f} MiB"


def _check_member(path, info, archive_size, memory_limit):
    """Refuses a member from its directory entry alone (nothing is decompressed)."""
    name = info.filename
    if info.flag_bits & 0x1:
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} is encrypted.")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} uses compression "
                         f"method {info.compress_type}; a .keras file has stored or deflated "
                         "members only.")
    if info.header_offset + info.compress_size > archive_size:
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} claims "
                         f"{info.compress_size:,} stored bytes past the end of the "
                         f"{archive_size:,}-byte file (truncated or forged).")
    limit, label = {"config.json": (MAX_CONFIG_BYTES, "config.json limit"),
                    "metadata.json": (MAX_METADATA_BYTES, "metadata.json limit")}.get(
        name, (memory_limit, "half of this machine's memory"))
    if info.file_size > limit:
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} declares "
                         f"{_mib(info.file_size)} uncompressed, over the {label} of "
                         f"{_mib(limit)}.")
    floor = _EXPANSION_FLOOR.get(name, _MiB)
    if info.file_size > floor and info.file_size > MAX_EXPANSION * info.compress_size:
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} declares "
                         f"{_mib(info.file_size)} uncompressed from {info.compress_size:,} "
                         f"stored bytes, over {MAX_EXPANSION}:1 (a decompression bomb).")


def _check_directory(path, archive, archive_size):
    """Checks the zip directory: member count, names, declared sizes, total."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ValueError(f"Cannot load {path!r}: the archive has {len(infos):,} members, over "
                         f"the limit of {MAX_MEMBERS:,} (not a Keras model file).")
    names, seen = set(), set()
    memory_limit = memory_bytes() // 2
    total = 0
    for info in infos:
        if info.filename in seen:
            raise ValueError(f"Cannot load {path!r}: the archive has two members named "
                             f"{info.filename!r} (a forged or badly merged archive).")
        seen.add(info.filename)
        names.add(info.filename.rstrip("/"))
        _check_member(path, info, archive_size, memory_limit)
        total += info.file_size
    if total > memory_limit:
        raise ValueError(f"Cannot load {path!r}: its members declare {_mib(total)} "
                         f"uncompressed in all, over half of this machine's memory "
                         f"({_mib(memory_limit)}).")
    if "config.json" not in seen:
        kind = ("config.json is a directory in the archive, not a file" if "config.json" in names
                else "the archive has no config.json")
        raise ValueError(f"Cannot load {path!r}: {kind}, so it is not a Keras model file.")
    return infos


def _json_depth(value):
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _check_config(path, data):
    try:
        config = json.loads(data)
    except RecursionError:
        raise ValueError(f"Cannot load {path!r}: config.json is nested too deeply to parse "
                         f"(limit {MAX_JSON_DEPTH} levels).") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot load {path!r}: config.json is not valid JSON "
                         f"({error}).") from error
    if not isinstance(config, dict):
        raise ValueError(f"Cannot load {path!r}: config.json holds a JSON "
                         f"{type(config).__name__.replace('NoneType', 'null')}, not the "
                         "object (dict) of a Keras model config.")
    depth = _json_depth(config)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"Cannot load {path!r}: config.json is nested {depth} levels deep, "
                         f"over the limit of {MAX_JSON_DEPTH}.")


def _check_keras_archive(path, mode):
    """Checks that `path` is an intact .keras zip with a JSON object in config.json.

    Limits come from the zip directory before anything is decompressed; the
    members are then read in bounded chunks (CRC check), so a decompression
    bomb or a directory entry lying about a size costs neither time nor memory.
    """
    if stat.S_ISDIR(mode):
        hint = (" (a SavedModel directory: load it with tfp_bnn.load_predictive)"
                if os.path.isfile(os.path.join(path, "saved_model.pb")) else "")
        raise ValueError(f"Cannot load {path!r}: it is a directory, not a .keras file{hint}.")
    if not stat.S_ISREG(mode):
        raise ValueError(f"Cannot load {path!r}: it is {_kind(mode)}, not a .keras file.")
    if not path.endswith(".keras"):
        raise ValueError(f"Cannot load {path!r}: expected a .keras file (written by "
                         "model.save('name.keras')), got the extension "
                         f"{os.path.splitext(path)[1] or '(none)'!r}.")
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                raise ValueError(f"Cannot load {path!r}: the file is empty (0 bytes).")
            if not zipfile.is_zipfile(file):
                raise ValueError(f"Cannot load {path!r}: not a zip archive, so not a .keras "
                                 "file (truncated, corrupted or another format).")
            file.seek(0)
            with zipfile.ZipFile(file) as archive:
                infos = _check_directory(path, archive, size)
                for info in infos:
                    with archive.open(info) as member:
                        if info.filename == "config.json":
                            config = member.read(MAX_CONFIG_BYTES + 1)
                        while member.read(_READ_CHUNK):
                            pass
    except zipfile.BadZipFile as error:
        if "CRC" in str(error):
            name = re.search(r"'(.*)'", str(error))
            raise ValueError(f"Cannot load {path!r}: the archive member "
                             f"{name.group(1) if name else '?'!r} is corrupted (CRC check "
                             "failed).") from error
        raise ValueError(f"Cannot load {path!r}: the zip archive is damaged "
                         f"({error}).") from error
    except (EOFError, OSError, RuntimeError, NotImplementedError, zipfile.LargeZipFile) \
            as error:
        raise ValueError(f"Cannot load {path!r}: the zip archive is damaged or unreadable "
                         f"({type(error).__name__}: {error}).") from error
    _check_config(path, config)


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
            nested over `MAX_JSON_DEPTH`), a config naming an unknown class,
            unsafe content under safe_mode, unreadable weights. The
            original error is the `__cause__`.

    Example:
    >>> model.save("bnn.keras")
    >>> again = tfp_bnn.load_model("bnn.keras")
    """
    path, info = _check_path(path, "load_model")
    _check_keras_archive(path, info.st_mode)
    try:
        return keras.saving.load_model(path, safe_mode=bool(safe_mode), compile=bool(compile))
    except _LOAD_ERRORS as error:
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
            raise ValueError(f"Cannot load {path!r}: {name} is {_kind(info.st_mode)}, not a "
                             "regular file.")
    graph = files["saved_model.pb"]
    if not stat.S_ISREG(graph.st_mode):
        raise ValueError(f"Cannot load {path!r}: saved_model.pb is a directory, not a file.")
    if graph.st_size == 0:
        raise ValueError(f"Cannot load {path!r}: saved_model.pb is empty (0 bytes).")
    if graph.st_size > MAX_GRAPH_BYTES:
        raise ValueError(f"Cannot load {path!r}: saved_model.pb has {_mib(graph.st_size)}, "
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
    >>> tfp_bnn.export.export_predictive(model, "bnn_predictive")
    >>> served = tfp_bnn.load_predictive("bnn_predictive")
    """
    path, info = _check_path(path, "load_predictive")
    if not stat.S_ISDIR(info.st_mode):
        hint = " (a .keras file: load it with tfp_bnn.load_model)" if path.endswith(
            ".keras") else ""
        kind = "a file" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)
        raise ValueError(f"Cannot load {path!r}: it is {kind}, not a SavedModel "
                         f"directory{hint}.")
    _check_savedmodel_files(path)
    try:
        loaded = tf.saved_model.load(path)
    except IndexError as error:  # the checkpoint reader's "Read less bytes than requested"
        raise ValueError(f"Cannot load the SavedModel {path!r}: a variables/ data file is "
                         f"shorter than variables.index says (truncated; {error}).") from error
    except _LOAD_ERRORS as error:
        raise ValueError(f"Cannot load the SavedModel {path!r}: it is corrupted or "
                         f"incomplete ({_innermost(error)})") from error
    if not hasattr(loaded, "serve"):
        raise ValueError(f"Cannot load {path!r}: the SavedModel has no `serve` endpoint (not "
                         "written by tfp_bnn.export or model.export).")
    return loaded

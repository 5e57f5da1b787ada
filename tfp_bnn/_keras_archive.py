"""Checks of a `.keras` archive before Keras opens it: zip directory, sizes, config.json.

Limits come from the zip directory before anything is decompressed; the members are then read in
bounded chunks (CRC check), so a decompression bomb or a directory entry lying about a size costs
neither time nor memory. Used by `tfp_bnn.saving.load_model`.
"""

import json
import os
import re
import stat
import zipfile

from tfp_bnn._memory import memory_bytes

_MiB = 2**20
# Limits on a .keras archive, checked on its zip directory before any member
# is read. Keras writes config.json (the model's JSON: kilobytes, a few MiB
# for a huge model), metadata.json (~100 bytes) and model.weights.h5, all
# stored uncompressed.
MAX_CONFIG_BYTES = 64 * _MiB
MAX_METADATA_BYTES = _MiB
MAX_MEMBERS = 10_000
# A member over EXPANSION_FLOOR that inflates over MAX_EXPANSION times its stored
# size is refused: stored members have ratio 1, DEFLATE tops out near 1032:1, so
# only a decompression bomb gets there. Keras refuses a member only above 4 GiB.
MAX_EXPANSION = 100
EXPANSION_FLOOR = _MiB
# The weights are tighter: Keras writes them stored and loads them whole, and
# float32 weights, trained or freshly initialised, deflate only 1.1-1.2:1 when an
# archive is recompressed, so 10:1 leaves room. At 100:1 a 38 MB file could hold
# 3.8 GB of weights (one inflating 56:1 loaded for 53 s in 3.8 GB of memory).
_MEMBER_EXPANSION = {"model.weights.h5": 10}
# Deeper JSON than this is refused: Keras deserializes configs recursively.
MAX_JSON_DEPTH = 512
_READ_CHUNK = _MiB


def file_kind(mode):
    """What a non-regular file is, for an error message (\"a FIFO (named pipe)\", ...)."""
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def mib(size):
    """`size` bytes as \"12.3 MiB\"."""
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
                         f"{mib(info.file_size)} uncompressed, over the {label} of "
                         f"{mib(limit)}.")
    ratio = _MEMBER_EXPANSION.get(name, MAX_EXPANSION)
    if info.file_size > EXPANSION_FLOOR and info.file_size > ratio * info.compress_size:
        hint = ("; Keras writes the weights uncompressed: save the model again with "
                "model.save" if name in _MEMBER_EXPANSION else "")
        raise ValueError(f"Cannot load {path!r}: the archive member {name!r} declares "
                         f"{mib(info.file_size)} uncompressed from {info.compress_size:,} "
                         f"stored bytes, over {ratio}:1 (a decompression bomb{hint}).")


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
        raise ValueError(f"Cannot load {path!r}: its members declare {mib(total)} "
                         f"uncompressed in all, over half of this machine's memory "
                         f"({mib(memory_limit)}).")
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


def check_keras_archive(path, mode):
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
        raise ValueError(f"Cannot load {path!r}: it is {file_kind(mode)}, not a .keras file.")
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

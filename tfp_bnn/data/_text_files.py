"""How every data file is read: a regular, bounded UTF-8 file of plain ASCII numbers.

The loaders of `tfp_bnn.data` (`uci`, `uci_layout`, `timeseries`) read their files
through `text_lines` and `parse_number`: a regular file no larger than a sixteenth of
physical memory, lines of at most 1 MiB, plain ASCII decimal numbers, each finite and
within float32's range (about 3.4e38), since models train in float32. Errors name the
file and the line; a MemoryError while reading names the file (`naming_file_on_memory_error`).
"""

import contextlib
import errno
import os
import re
import stat

import numpy as np

from tfp_bnn._memory import memory_bytes

# Models train in float32: a larger magnitude would turn into inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# A number as a data file writes it: sign, digits with an optional decimal
# point (or a leading one), exponent. ASCII only: Python's float() also takes
# "1_0", full-width digits, "nan" and "infinity", none of which a data file
# means as a number.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# Fields are separated by ASCII whitespace only: a no-break or full-width
# space inside a field makes it fail as a number instead of splitting it.
ASCII_SPACE = " \t\r\n\f\v"
# The most bytes one line may have. A data row is a few hundred bytes; splitting a
# line holds ~60 bytes per field, so a 100 MB one-line file took 2.9 GB before any
# check saw it. Lines are read at most this long, so a longer one costs 1 MiB.
MAX_LINE_BYTES = 2**20
# Parsed, a value takes 8 bytes and a row's line number 8 more: up to 8 times the
# text of a file of one-digit rows ("0\n"). Files up to this share of physical
# memory keep that within half of it.
FILE_MEMORY_SHARE = 16
_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_OPEN_ERRORS = {errno.ENOENT: "no such file", errno.EISDIR: "is a directory, not a file",
                errno.EACCES: "permission denied", errno.ENOTDIR: "a parent is not a directory",
                errno.ELOOP: "too many levels of symbolic links"}


def shown(field: str, limit: int = 40) -> str:
    """repr of a field for an error message, cut to `limit` characters."""
    return repr(field if len(field) <= limit else field[:limit - 3] + "...")


def max_file_bytes():
    """Largest file the loaders read: a sixteenth of physical memory.

    Parsed rows take at most 8 times the bytes of their text (one-digit
    values), typically under 2 times; the limit leaves room for that and
    for the copies that standardisation and training make.
    """
    return memory_bytes() // FILE_MEMORY_SHARE


def check_regular_file(path) -> os.stat_result:
    """Stats `path` and refuses anything but a regular file of bounded size.

    Runs before the file is opened: opening a FIFO blocks until a writer
    appears, i.e. forever. Symbolic links to regular files are followed.

    Raises:
        ValueError: naming the file, for a missing path, a directory, FIFO,
            device or socket, or a file above `max_file_bytes()`.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as error:
        reason = _OPEN_ERRORS.get(error.errno, error.strerror)
        raise ValueError(f"{path}: cannot read the data file ({reason}).") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path}: cannot read the data file (is a directory, not a file).")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)),
                    "not a regular file")
        raise ValueError(f"{path}: cannot read the data file (is {kind}, not a regular file).")
    limit = max_file_bytes()
    if info.st_size > limit:
        raise ValueError(f"{path}: the file has {info.st_size} bytes, more than the "
                         f"{limit} (a sixteenth of physical memory) a data file may have.")
    return info


def text_lines(path):
    """Yields (1-based line number, line) of a regular UTF-8 text file.

    A UTF-8 byte-order mark at the start is dropped; lines end in LF or CRLF.

    Raises:
        ValueError: naming the file for a path that `check_regular_file`
            refuses or that cannot be opened, and the line for bytes that
            are not UTF-8 text or a carriage return inside a line.
    """
    path = os.fspath(path)
    check_regular_file(path)
    # O_NONBLOCK: should the path be swapped for a FIFO after the check, the
    # open returns at once and the fstat below refuses it.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        reason = _OPEN_ERRORS.get(error.errno, error.strerror)
        raise ValueError(f"{path}: cannot read the data file ({reason}).") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{path}: cannot read the data file (not a regular file).")
    with os.fdopen(descriptor, "rb") as handle:
        for line_number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""),
                                          start=1):
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise ValueError(f"{path}, line {line_number}: longer than "
                                 f"{MAX_LINE_BYTES:,} bytes (1 MiB); a data file has one row "
                                 "per line (a file without line breaks?).")
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{path}, line {line_number}: not UTF-8 text (a binary or "
                                 "corrupted file?).") from None
            if "\r" in line.rstrip("\r\n"):
                raise ValueError(f"{path}, line {line_number}: a carriage return inside the "
                                 "line (old Mac line endings?); lines must end in LF or CRLF.")
            yield line_number, line


def is_number(field: str) -> bool:
    """Whether `field` is a number as `parse_number` reads it (finite or not)."""
    return bool(_NUMBER.fullmatch(field))


def parse_number(field: str, where: str) -> float:
    """One number of a data file as a float; `where` (file, line...) starts any error.

    Accepts ASCII decimal notation: `-2`, `.5`, `+3.`, `1e-3`, `1E+05`.

    Raises:
        ValueError: for anything else (`1_0`, full-width digits, `0x1A`,
            `1,5`), NaN or inf, and a magnitude above float32's maximum.
    """
    if not _NUMBER.fullmatch(field):
        if _NON_FINITE.fullmatch(field):
            raise ValueError(f"{where}: {shown(field)} is not a finite number.")
        raise ValueError(f"{where}: {shown(field)} is not a number.")
    value = float(field)
    if not abs(value) <= FLOAT32_MAX:
        raise ValueError(f"{where}: {shown(field)} is beyond float32's range (magnitude at "
                         f"most {FLOAT32_MAX:.4g}).")
    return value


@contextlib.contextmanager
def naming_file_on_memory_error(path):
    """Re-raises a MemoryError while reading `path` as one that names the file and its size."""
    try:
        yield
    except MemoryError:
        try:
            size = f"{os.stat(path).st_size:,} bytes"
        except OSError:
            size = "size unknown"
        raise MemoryError(f"{path}: out of memory while reading the data file "
                          f"({size})") from None


def first_beyond_float32(values):
    """Index tuple of the first entry of `values` that is NaN or beyond float32's range."""
    bad = ~(np.abs(values) <= FLOAT32_MAX)
    return tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None

"""Where an export is written: a new directory, filled in a hidden sibling and renamed.

A failed or interrupted export leaves nothing at the path. Used by `tfp_bnn.export`.
"""

import contextlib
import os
import shutil
import uuid

from tfp_bnn._tf import tf


def check_new_path(path):
    """The absolute export path; ValueError if it exists or its parent cannot hold it."""
    if not isinstance(path, (str, bytes, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"The export path must be a non-empty str or path, got {path!r}.")
    path = os.path.abspath(os.fsdecode(path))
    if os.path.lexists(path):
        raise ValueError(f"Export path {path!r} already exists; choose a new directory.")
    ancestor = os.path.dirname(path)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ValueError(f"Cannot export to {path!r}: {ancestor!r} is a file, not a "
                         "directory.")
    return path


@contextlib.contextmanager
def staging_directory(path):
    """Yields a fresh sibling directory of `path`, renamed to `path` on success.

    A failed or interrupted export leaves nothing at `path`: the SavedModel
    is written next to it under a hidden name and moved into place by one
    rename at the end; on error the staging directory (and any parent
    directories created for it) is removed.
    """
    parent = os.path.dirname(path)
    created = []
    head = parent
    while not os.path.isdir(head):
        created.append(head)
        head = os.path.dirname(head)
    staging = os.path.join(parent, f".{os.path.basename(path)}.partial-{uuid.uuid4().hex[:8]}")
    try:
        try:
            os.makedirs(parent, exist_ok=True)
            os.mkdir(staging)  # mode 0o777 & ~umask, like the directory it becomes
        except OSError as error:
            raise ValueError(f"Cannot export to {path!r}: {error.strerror} "
                             f"({error.filename}).") from error
        try:
            yield staging
        except (OSError, tf.errors.OpError) as error:
            raise ValueError(f"Writing the SavedModel to {path!r} failed: {error}") from error
        if os.path.lexists(path):
            raise ValueError(f"Export path {path!r} appeared while the model was being "
                             "written; nothing was overwritten.")
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for directory in created:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise


def write(archive, path):
    """Writes a `keras.export.ExportArchive` to the new directory `path`, all or nothing."""
    with staging_directory(path) as staging:
        archive.write_out(staging, verbose=False)

"""Hostile files for tfp_bnn.load_model and tfp_bnn.load_predictive.

Decompression bombs, forged zip directories, pathological JSON, special
files (FIFOs, devices, symlink loops) and truncated SavedModel variables:
each must give one ValueError line naming the file, within seconds and
without reading what it does not need (tests/test_saving.py has the plainly
damaged files). A bomb is written as zeros DEFLATEd at level 1 (512 MiB in
~0.6 s, 2 MiB on disk); declared sizes are forged by patching the zip's
central directory.
"""

import json
import os
import re
import shutil
import struct
import threading
import time
import warnings
import zipfile

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import DenseFlipout

_MiB = 2**20
SECONDS = 10  # generous for a loaded CI machine; the checks take milliseconds


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(members of a good .keras file as {name: bytes}, its predictive SavedModel)."""
    root = tmp_path_factory.mktemp("hostile")
    model = keras.Sequential([keras.Input((3,)), DenseFlipout(4, kl_weight=0.1, seed=0)])
    model.save(root / "model.keras")
    tfp_bnn.export.export_predictive(model, root / "predictive", task="classification")
    with zipfile.ZipFile(root / "model.keras") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    return members, root / "predictive"


def _refused(call, path, problem):
    """Calls the loader; asserts one ValueError line naming `path` and `problem`, in time."""
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        call(path)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "\n" not in message, message
    assert f"'{path}'" in message, message
    assert re.search(problem, message), message
    assert elapsed < SECONDS, f"took {elapsed:.1f} s: {message}"
    return info.value


def _archive(path, members, extra=()):
    """A .keras zip of `members` ({name: bytes}, stored) plus `extra` (name, writer) pairs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # duplicate names on purpose
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
            for name, write in extra:
                write(archive, name)
    return path


def _zeros(size, compress_type=zipfile.ZIP_DEFLATED):
    def write(archive, name):
        info = zipfile.ZipInfo(name)
        info.compress_type = compress_type
        info._compresslevel = 1
        chunk = bytes(min(size, 4 * _MiB))
        with archive.open(info, "w") as member:
            for _ in range(size // len(chunk)):
                member.write(chunk)
    return write


def _without(members, *names):
    return {name: data for name, data in members.items() if name not in names}


def _patch_directory(path, name, offset, fmt, value):
    """Overwrites a field of `name`'s central directory entry (offsets per APPNOTE 4.3.12)."""
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x01\x02", 0, data.rfind(name.encode()))
    struct.pack_into(fmt, data, at + offset, value)
    path.write_bytes(bytes(data))
    return path


# -- .keras archives ---------------------------------------------------------------


def test_config_bomb_is_refused_from_the_directory(saved, tmp_path):
    members = _without(saved[0], "config.json")
    path = _archive(tmp_path / "bomb.keras", members, [("config.json", _zeros(512 * _MiB))])
    _refused(tfp_bnn.load_model, path, r"member 'config.json' declares 512.0 MiB "
                                       r"uncompressed, over the config.json limit of 64.0 MiB")


@pytest.mark.parametrize("member, ratio", [("model.weights.h5", 10), ("assets/blob.bin", 100)])
def test_member_bomb_is_refused_by_its_ratio(saved, tmp_path, member, ratio):
    members = _without(saved[0], member)
    path = _archive(tmp_path / "bomb.keras", members, [(member, _zeros(512 * _MiB))])
    _refused(tfp_bnn.load_model, path, rf"member '{member}' declares 512.0 MiB uncompressed "
                                       rf"from [\d,]+ stored bytes, over {ratio}:1 \(a "
                                       r"decompression bomb")


def _sparse(blocks):
    """Writes `blocks` of 16 KiB of random bytes and 1 MiB of zeros: deflates about 60:1."""
    noise = np.random.default_rng(0).bytes(16 * 1024)

    def write(archive, name):
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w") as member:
            for _ in range(blocks):
                member.write(noise + bytes(_MiB))
    return write


def test_weights_inflating_under_100_to_1_are_refused(saved, tmp_path):
    # Under 100:1 and 256 MiB the weights passed: a 38 MB file inflating 56:1
    # loaded for 53 s in 3.8 GB. Keras writes them stored; recompressed float32
    # weights deflate 1.1-1.2:1 (see the next test), so 10:1 is the limit.
    members = _without(saved[0], "model.weights.h5")
    path = _archive(tmp_path / "sparse.keras", members, [("model.weights.h5", _sparse(8))])
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.weights.h5")
    assert 10 < info.file_size / info.compress_size < 100
    _refused(tfp_bnn.load_model, path, r"^Cannot load .*: the archive member "
                                       r"'model.weights.h5' declares 8.1 MiB uncompressed "
                                       r"from [\d,]+ stored bytes, over 10:1 \(a decompression "
                                       r"bomb; Keras writes the weights uncompressed: save the "
                                       r"model again with model.save\)\.$")


def test_recompressed_real_weights_still_load(tmp_path):
    model = keras.Sequential([keras.Input((600,)), DenseFlipout(600, kl_weight=0.1, seed=0)])
    model.save(tmp_path / "stored.keras")
    with zipfile.ZipFile(tmp_path / "stored.keras") as stored, \
            zipfile.ZipFile(tmp_path / "deflated.keras", "w", zipfile.ZIP_DEFLATED,
                            compresslevel=9) as deflated:
        for name in stored.namelist():
            deflated.writestr(name, stored.read(name))
    with zipfile.ZipFile(tmp_path / "deflated.keras") as archive:
        info = archive.getinfo("model.weights.h5")
    assert info.file_size > _MiB and info.file_size / info.compress_size < 2
    loaded = tfp_bnn.load_model(tmp_path / "deflated.keras")
    for ours, theirs in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours),
                                      keras.ops.convert_to_numpy(theirs))


def test_forged_huge_declared_size_is_refused(saved, tmp_path):
    path = _archive(tmp_path / "forged.keras", saved[0])
    _patch_directory(path, "config.json", 24, "<I", 3 * 2**30)
    _refused(tfp_bnn.load_model, path, r"'config.json' declares 3,072.0 MiB uncompressed, "
                                       r"over the config.json limit")


def test_forged_small_declared_size_reads_no_further(saved, tmp_path):
    """A member inflating far past its declared size is read up to that size only."""
    members = _without(saved[0], "config.json")
    path = _archive(tmp_path / "lying.keras", members,
                    [("config.json", _zeros(64 * _MiB))])
    _patch_directory(path, "config.json", 24, "<I", 1000)
    _refused(tfp_bnn.load_model, path, r"the archive member 'config.json' is corrupted "
                                       r"\(CRC check failed\)")


def test_stored_size_past_the_end_of_the_file_is_refused(saved, tmp_path):
    path = _archive(tmp_path / "past_end.keras", saved[0])
    _patch_directory(path, "model.weights.h5", 20, "<I", 2**31)
    _refused(tfp_bnn.load_model, path, r"'model.weights.h5' claims 2,147,483,648 stored "
                                       r"bytes past the end of the [\d,]+-byte file")


def test_oversized_metadata_is_refused(saved, tmp_path):
    members = dict(saved[0], **{"metadata.json": b" " * (2 * _MiB)})
    path = _archive(tmp_path / "metadata.keras", members)
    _refused(tfp_bnn.load_model, path, r"'metadata.json' declares 2.0 MiB uncompressed, over "
                                       r"the metadata.json limit of 1.0 MiB")


def test_too_many_members_are_refused(saved, tmp_path):
    path = _archive(tmp_path / "many.keras", saved[0],
                    [(f"assets/{i}", lambda a, n: a.writestr(n, b"")) for i in range(10_001)])
    _refused(tfp_bnn.load_model, path, r"the archive has 10,004 members, over the limit of "
                                       r"10,000")


@pytest.mark.parametrize(
    "config, problem",
    [
        (b"[" * 100_000, r"config.json is nested too deeply to parse \(limit 512 levels\)"),
        (b'{"a": ' + b"[" * 600 + b"]" * 600 + b"}",
         r"config.json is nested 601 levels deep, over the limit of 512"),
        (b"null", r"config.json holds a JSON null, not the object"),
        (b"[1, 2]", r"config.json holds a JSON list, not the object"),
        (b"3.5", r"config.json holds a JSON float, not the object"),
        (b"\xff\xfe\x00garbage", r"config.json is not valid JSON"),
    ],
    ids=["deep_unparseable", "deep_parseable", "null", "list", "number", "not_utf"],
)
def test_pathological_config_json(saved, tmp_path, config, problem):
    path = _archive(tmp_path / "config.keras", dict(saved[0], **{"config.json": config}))
    _refused(tfp_bnn.load_model, path, problem)


def test_config_with_a_utf8_bom_loads_as_keras_does(saved, tmp_path):
    members = dict(saved[0], **{"config.json": b"\xef\xbb\xbf" + saved[0]["config.json"]})
    model = tfp_bnn.load_model(_archive(tmp_path / "bom.keras", members))
    assert isinstance(model.layers[0], DenseFlipout)


def test_config_member_that_is_a_directory(saved, tmp_path):
    members = _without(saved[0], "config.json")
    path = _archive(tmp_path / "dir.keras", members,
                    [("config.json/", lambda a, n: a.mkdir(n))])
    _refused(tfp_bnn.load_model, path, r"config.json is a directory in the archive, not a file")


def test_duplicate_member_names(saved, tmp_path):
    path = _archive(tmp_path / "twice.keras", saved[0],
                    [("config.json", lambda a, n: a.writestr(n, b"null"))])
    _refused(tfp_bnn.load_model, path, r"the archive has two members named 'config.json'")


def test_encrypted_member(saved, tmp_path):
    path = _archive(tmp_path / "secret.keras", saved[0])
    _patch_directory(path, "config.json", 8, "<H", 0x1)
    _refused(tfp_bnn.load_model, path, r"the archive member 'config.json' is encrypted")


def test_unusual_compression_method(saved, tmp_path):
    members = _without(saved[0], "metadata.json")
    path = _archive(tmp_path / "bz2.keras", members,
                    [("metadata.json", _zeros(1024, zipfile.ZIP_BZIP2))])
    _refused(tfp_bnn.load_model, path, r"'metadata.json' uses compression method 12; a .keras "
                                       r"file has stored or deflated members only")


class _FifoWatch:
    """Notices a reader blocked on a FIFO, and releases it (the test then fails, not hangs)."""

    def __init__(self, path):
        self.path, self.reader_seen = os.fspath(path), False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(0.05):
            try:  # succeeds only while someone has the FIFO open for reading
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
                self.reader_seen = True
            except OSError:
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_fifo_is_refused_without_opening_it(tmp_path):
    path = tmp_path / "pipe.keras"
    os.mkfifo(path)
    with _FifoWatch(path) as watch:
        _refused(tfp_bnn.load_model, path, r"it is a FIFO \(named pipe\), not a .keras file")
    assert not watch.reader_seen


def test_device_is_refused(tmp_path):
    path = tmp_path / "zero.keras"
    path.symlink_to("/dev/zero")
    _refused(tfp_bnn.load_model, path, r"it is a character device, not a .keras file")


def test_symlink_loop(tmp_path):
    (tmp_path / "a.keras").symlink_to(tmp_path / "b.keras")
    (tmp_path / "b.keras").symlink_to(tmp_path / "a.keras")
    _refused(tfp_bnn.load_model, tmp_path / "a.keras", r"Too many levels of symbolic links")


def test_dangling_symlink(tmp_path):
    (tmp_path / "gone.keras").symlink_to(tmp_path / "nowhere.keras")
    _refused(tfp_bnn.load_model, tmp_path / "gone.keras",
             r"no such file or directory \(a symbolic link to a missing target\)")


# -- SavedModel directories ----------------------------------------------------------

DATA = "variables/variables.data-00000-of-00001"
INDEX = "variables/variables.index"


def _copy(good, tmp_path):
    path = tmp_path / "predictive"
    shutil.copytree(good, path)
    return path


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(
    "name, keep, problem",
    [
        (DATA, 0, rf"{DATA} is empty \(0 bytes; truncated"),
        (DATA, 0.5, r"a variables/ data file is shorter than variables.index says "
                    r"\(truncated; Read less bytes than requested\)"),
        (INDEX, 0, rf"{INDEX} is empty \(0 bytes; truncated"),
        (INDEX, 0.5, r"it is corrupted or incomplete \(.*not an sstable"),
    ],
    ids=["empty_data", "truncated_data", "empty_index", "truncated_index"],
)
def test_damaged_variables(saved, tmp_path, name, keep, problem):
    path = _copy(saved[1], tmp_path)
    _truncate(path / name, keep)
    _refused(tfp_bnn.load_predictive, path, problem)


@pytest.mark.parametrize("name", [DATA, INDEX, "saved_model.pb"])
def test_fifo_inside_a_savedmodel(saved, tmp_path, name):
    path = _copy(saved[1], tmp_path)
    os.remove(path / name)
    os.mkfifo(path / name)
    with _FifoWatch(path / name) as watch:
        _refused(tfp_bnn.load_predictive, path, rf"{name} is a FIFO \(named pipe\), not a "
                                                r"regular file")
    assert not watch.reader_seen


def test_savedmodel_path_is_a_fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    _refused(tfp_bnn.load_predictive, path, r"it is a FIFO \(named pipe\), not a SavedModel "
                                            r"directory")


def test_symlink_loop_inside_a_savedmodel(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    os.remove(path / DATA)
    os.symlink(path / DATA, path / DATA)
    _refused(tfp_bnn.load_predictive, path, rf"{DATA} cannot be read \(Too many levels of "
                                            r"symbolic links\)")


def test_saved_model_pb_that_is_a_directory(saved, tmp_path):
    path = _copy(saved[1], tmp_path)
    os.remove(path / "saved_model.pb")
    os.mkdir(path / "saved_model.pb")
    _refused(tfp_bnn.load_predictive, path, r"saved_model.pb is a directory, not a file")


def test_deep_but_parseable_config_gives_a_short_line(saved, tmp_path):
    """A 500-level initializer config is refused by Keras; its repr is cut, not dumped."""
    deep = {"a": 1}
    for _ in range(500):
        deep = {"class_name": "x", "config": deep}
    config = json.loads(saved[0]["config.json"])
    config["config"]["layers"][1]["config"]["kernel_initializer"] = deep
    path = _archive(tmp_path / "deep.keras",
                    dict(saved[0], **{"config.json": json.dumps(config).encode()}))
    error = _refused(tfp_bnn.load_model, path, r"Could not interpret initializer identifier")
    assert len(str(error)) < 500


def test_damaged_hdf5_structure_behind_a_valid_crc(saved, tmp_path):
    """A re-zipped weights file whose B-tree signature is broken: h5py's error, named.

    Keras 3.15 lets h5py's RuntimeError through; earlier versions gather it
    into a ValueError that names it two lines down, and the line keeps it.
    """
    weights = saved[0]["model.weights.h5"].replace(b"TREE", b"TRXX", 1)
    path = _archive(tmp_path / "heap.keras", dict(saved[0], **{"model.weights.h5": weights}))
    error = _refused(tfp_bnn.load_model, path, r"B-tree|signature")
    assert isinstance(error.__cause__, RuntimeError) or "B-tree" in str(error.__cause__)


def test_an_error_line_ending_in_a_colon_keeps_the_line_it_announces():
    """Keras before 3.15 words unreadable weights so: the first line alone says nothing."""
    keras_error = ValueError(
        "A total of 2 objects could not be loaded. Example error message for object "
        "<Sequential name=s, built=True>:\n\nUnable to synchronously open object (wrong B-tree "
        "signature)\n\nList of objects that could not be loaded:\n[<Sequential>]")
    assert tfp_bnn.saving._describe_keras_error("m.keras", keras_error) == (
        "Cannot load 'm.keras': ValueError: A total of 2 objects could not be loaded. Example "
        "error message for object <Sequential name=s, built=True>: Unable to synchronously "
        "open object (wrong B-tree signature)")

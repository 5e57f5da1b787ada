"""tfp_bnn.load_model and tfp_bnn.load_predictive: damaged files give clear ValueErrors.

One small model is saved as .keras and exported as a predictive SavedModel
once per module; each case damages a copy in its own way and checks that
the error names the path and the problem (and keeps the original error as
`__cause__` where keras or TensorFlow raised one).
"""

import json
import os
import re
import shutil
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.layers import DenseFlipout

X = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(model, its .keras file, its predictive SavedModel directory)."""
    root = tmp_path_factory.mktemp("saved")
    model = keras.Sequential([keras.Input((3,)), DenseFlipout(4, kl_weight=0.1, seed=0)])
    model.compile("sgd", "mse")
    model.save(root / "model.keras")
    tfp_bnn.export.export_predictive(model, root / "predictive", task="classification")
    return model, root / "model.keras", root / "predictive"


def _error(call, path, problem):
    with pytest.raises(ValueError, match=re.escape(f"'{path}'") + ".*" + problem) as info:
        call(path)
    return info.value


# -- load_model ------------------------------------------------------------------


def test_load_model_round_trip(saved):
    model, path, _ = saved
    loaded = tfp_bnn.load_model(path)
    with tfp_bnn.mean_mode(model), tfp_bnn.mean_mode(loaded):
        np.testing.assert_array_equal(loaded(X), model(X))
    assert not tfp_bnn.load_model(str(path), compile=False).compiled


def _rezip(source, target, drop=(), replace=None):
    replace = replace or {}
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for name in old.namelist():
            if name not in drop:
                new.writestr(name, replace.get(name, old.read(name)))
    return target


def _config(path):
    with zipfile.ZipFile(path) as archive:
        return archive.read("config.json").decode()


def _damage(kind, good, tmp_path):
    """A damaged copy of the good .keras file (or another bad path)."""
    data = good.read_bytes()
    if kind == "missing":
        return tmp_path / "missing.keras"
    if kind == "empty":
        path = tmp_path / "empty.keras"
        path.write_bytes(b"")
    elif kind == "random_bytes":
        path = tmp_path / "random.keras"
        path.write_bytes(np.random.default_rng(1).bytes(4096))
    elif kind == "truncated":
        path = tmp_path / "truncated.keras"
        path.write_bytes(data[: len(data) * 2 // 3])
    elif kind == "no_config":
        path = _rezip(good, tmp_path / "no_config.keras", drop=("config.json",))
    elif kind == "bad_json":
        path = _rezip(good, tmp_path / "bad_json.keras", replace={"config.json": "{'model':"})
    elif kind == "unknown_class":
        config = _config(good).replace("DenseFlipout", "DenseFlopout")
        path = _rezip(good, tmp_path / "unknown.keras", replace={"config.json": config})
    elif kind == "crc":
        damaged = bytearray(data)
        damaged[data.find(b"HDF") + 300] ^= 0xFF
        path = tmp_path / "crc.keras"
        path.write_bytes(bytes(damaged))
    elif kind == "bad_weights":
        path = _rezip(good, tmp_path / "bad_weights.keras",
                      replace={"model.weights.h5": b"not an HDF5 file"})
    elif kind == "no_weights":
        path = _rezip(good, tmp_path / "no_weights.keras", drop=("model.weights.h5",))
    elif kind in ("h5", "zip"):
        path = tmp_path / f"model.{kind}"
        path.write_bytes(data)
    elif kind == "directory":
        path = tmp_path / "folder"
        path.mkdir()
    return path


@pytest.mark.parametrize(
    "kind, problem, cause",
    [
        ("missing", r"no such file or directory", None),
        ("empty", r"the file is empty \(0 bytes\)", None),
        ("random_bytes", r"not a zip archive, so not a .keras file", None),
        ("truncated", r"not a zip archive, so not a .keras file \(truncated", None),
        ("no_config", r"the archive has no config.json, so it is not a Keras model file", None),
        ("bad_json", r"config.json is not valid JSON", json.JSONDecodeError),
        ("unknown_class", r"its config names an unknown class 'DenseFlopout'", TypeError),
        ("crc", r"the archive member 'model.weights.h5' is corrupted \(CRC check failed\)",
         None),
        ("bad_weights", r"OSError: Unable to .*open file", OSError),
        ("no_weights", r"Expected a model.weights.h5", ValueError),
        ("h5", r"expected a .keras file .* got the extension '.h5'", None),
        ("zip", r"expected a .keras file .* got the extension '.zip'", None),
        ("directory", r"it is a directory, not a .keras file\.", None),
    ],
)
def test_load_model_bad_files(saved, tmp_path, kind, problem, cause):
    path = _damage(kind, saved[1], tmp_path)
    error = _error(tfp_bnn.load_model, path, problem)
    if cause is not None:
        assert isinstance(error.__cause__, cause)


def test_load_model_on_a_savedmodel_points_to_load_predictive(saved):
    _error(tfp_bnn.load_model, saved[2], r"a SavedModel directory: load it with "
                                         r"tfp_bnn.load_predictive")


def test_load_model_refuses_lambdas_in_safe_mode(tmp_path):
    path = tmp_path / "lambda.keras"
    keras.Sequential([keras.Input((2,)), keras.layers.Lambda(lambda x: 2 * x)]).save(path)
    # Keras' wording of the refusal changed after 3.10; both name the Lambda layer.
    _error(tfp_bnn.load_model, path, r"with safe_mode=True: .*(deserialization of a `Lambda` "
                                     r"layer|of this `Lambda` layer is a Python lambda)")


@pytest.mark.parametrize("path", [None, "", 3])
def test_load_model_needs_a_path(path):
    with pytest.raises(ValueError, match=r"load_model needs a non-empty str or path, got"):
        tfp_bnn.load_model(path)


# -- load_predictive ---------------------------------------------------------------


def test_load_predictive_serves(saved):
    served = tfp_bnn.load_predictive(saved[2])
    out = served.serve(X, tf.constant(5))
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)


def _damaged_savedmodel(kind, good, tmp_path):
    path = tmp_path / kind
    if kind == "missing":
        return path
    if kind == "not_a_savedmodel":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
        return path
    shutil.copytree(good, path)
    if kind == "garbage_pb":
        (path / "saved_model.pb").write_bytes(b"\x08garbage" * 10)
    elif kind == "empty_pb":
        (path / "saved_model.pb").write_bytes(b"")
    elif kind == "no_variables":
        shutil.rmtree(path / "variables")
    elif kind == "garbage_variables":
        for file in (path / "variables").iterdir():
            file.write_bytes(b"xx")
    elif kind == "no_variable_data":
        for file in (path / "variables").glob("variables.data-*"):
            file.unlink()
    return path


@pytest.mark.parametrize(
    "kind, problem, cause",
    [
        ("missing", r"no such file or directory", None),
        ("not_a_savedmodel", r"not a SavedModel directory \(it has no saved_model.pb\)", None),
        ("garbage_pb", r"it is corrupted or incomplete \(DecodeError", Exception),
        ("empty_pb", r"saved_model.pb is empty \(0 bytes\)", None),
        ("no_variables", r"variables/variables.index is missing", None),
        ("garbage_variables", r"it is corrupted or incomplete", Exception),
        ("no_variable_data", r"it is corrupted or incomplete .*variables.data", Exception),
    ],
)
def test_load_predictive_bad_directories(saved, tmp_path, kind, problem, cause):
    path = _damaged_savedmodel(kind, saved[2], tmp_path)
    error = _error(tfp_bnn.load_predictive, path, problem)
    if cause is not None:
        assert isinstance(error.__cause__, cause)


def test_load_predictive_on_a_keras_file_points_to_load_model(saved):
    _error(tfp_bnn.load_predictive, saved[1], r"it is a file, not a SavedModel directory \(a "
                                              r".keras file: load it with tfp_bnn.load_model")


def test_load_predictive_needs_a_serve_endpoint(tmp_path):
    path = tmp_path / "module"
    tf.saved_model.save(tf.Module(), os.fspath(path))
    _error(tfp_bnn.load_predictive, path, r"the SavedModel has no `serve` endpoint")

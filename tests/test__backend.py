"""`import tfp_bnn` on a Keras backend other than TensorFlow: one clear ImportError."""

import json
import os
import subprocess
import sys

import pytest

from tfp_bnn import _backend


@pytest.mark.parametrize("name", ["jax", "torch", "numpy", "openvino"])
def test_every_other_backend_gets_the_one_message(name):
    with pytest.raises(ImportError) as info:
        _backend.check_backend(name)
    message = str(info.value)
    assert f"active Keras backend is {name!r}" in message
    assert "KERAS_BACKEND=tensorflow" in message
    assert "before keras is first imported" in message


def test_tensorflow_passes_and_is_what_this_process_runs():
    _backend.check_backend("tensorflow")
    _backend.require_tensorflow()


def _home_with_config(tmp_path, config):
    (tmp_path / "keras.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(tmp_path)


def test_configured_backend_reads_keras_precedence(tmp_path, monkeypatch):
    home = _home_with_config(tmp_path, {"backend": "jax", "floatx": "float32"})
    monkeypatch.setenv("KERAS_HOME", home)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert _backend.configured_backend() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")  # the variable overrides keras.json
    assert _backend.configured_backend() == "torch"
    monkeypatch.setenv("KERAS_BACKEND", "")  # empty: ignored, as Keras ignores it
    assert _backend.configured_backend() == "jax"


@pytest.mark.parametrize("config", ["{not json", "[1, 2]", {"backend": ""}, {"floatx": "float32"}],
                         ids=["broken_json", "not_a_dict", "empty_backend", "no_backend"])
def test_unreadable_or_silent_config_means_tensorflow(tmp_path, monkeypatch, config):
    monkeypatch.setenv("KERAS_HOME", _home_with_config(tmp_path, config))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert _backend.configured_backend() == "tensorflow"
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "missing"))
    assert _backend.configured_backend() == "tensorflow"


def test_import_under_the_numpy_backend_fails_with_the_message(tmp_path):
    # A real interpreter: Keras picks its backend once, at its first import.
    env = {**os.environ, "KERAS_BACKEND": "numpy", "KERAS_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", "import tfp_bnn"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: tfp_bnn needs the TensorFlow backend"), done.stderr
    assert "'numpy'" in last and "KERAS_BACKEND=tensorflow" in last

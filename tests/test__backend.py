"""`import tfp_bnn` on TensorFlow and JAX; on any other Keras backend one clear ImportError."""

import json
import os
import subprocess
import sys

import keras
import pytest

from tfp_bnn import _backend

# The tests that start an interpreter of their own set its backend there, so
# the TensorFlow run covers them; the others are marked to run on JAX too.


@pytest.mark.jax
@pytest.mark.parametrize("name", ["torch", "numpy", "openvino"])
def test_every_other_backend_gets_the_one_message(name):
    with pytest.raises(ImportError) as info:
        _backend.check_backend(name)
    message = str(info.value)
    assert f"active Keras backend is {name!r}" in message
    assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax" in message
    assert "before keras is first imported" in message


@pytest.mark.jax
def test_tensorflow_and_jax_pass_and_this_process_runs_one_of_them():
    _backend.check_backend("tensorflow")
    _backend.check_backend("jax")
    _backend.require_supported()
    assert _backend.active() == keras.backend.backend() in _backend.SUPPORTED
    assert _backend.is_jax() == (keras.backend.backend() == "jax")


def _home_with_config(tmp_path, config):
    (tmp_path / "keras.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(tmp_path)


@pytest.mark.jax
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
@pytest.mark.jax
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
    assert last.startswith("ImportError: tfp_bnn runs on the TensorFlow and JAX"), done.stderr
    assert "'numpy'" in last and "KERAS_BACKEND=jax" in last


@pytest.mark.jax
def test_a_jax_newer_than_tfp_knows_gets_the_versions_and_the_extra(monkeypatch):
    import tensorflow_probability.substrates as substrates

    class Broken:
        def __getattr__(self, name):
            raise AttributeError("module 'jax.interpreters.xla' has no attribute "
                                 "'pytype_aval_mappings'")

    pytest.importorskip("jax")
    monkeypatch.setattr(substrates, "jax", Broken(), raising=False)
    with pytest.raises(ImportError) as info:
        _backend._check_jax_substrate()
    message = str(info.value)
    assert "fails with jax" in message and "pytype_aval_mappings" in message
    assert 'pip install "tfp-bnn[jax]"' in message


_WITHOUT_JAX = """
import sys
sys.modules["jax"] = None  # as if jax were not installed: importing it raises ImportError
import numpy as np, keras, tfp_bnn
model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2, seed=0)])
print(tfp_bnn.predict.sample(model, np.ones((4, 3), "float32"), num_samples=5).shape)
"""


def test_a_tensorflow_install_without_jax_imports_and_predicts(tmp_path):
    # jax is an extra: nothing on the TensorFlow path may import it.
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "KERAS_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _WITHOUT_JAX], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(5, 4, 2)"

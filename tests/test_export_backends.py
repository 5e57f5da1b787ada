"""On JAX the SavedModel exports refuse at once, naming the way across; a `.keras`
file saved on JAX loads on TensorFlow and exports there with the same weights."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import tfp_bnn

pytestmark = pytest.mark.jax


def _flipout_model():
    model = keras.Sequential([keras.Input((3,)),
                              tfp_bnn.layers.DenseFlipout(2, kl_weight=0.01, seed=0)])
    model(np.ones((1, 3), "float32"))
    return model


@pytest.mark.parametrize("name", ["export_saved_model", "export_predictive"])
def test_saved_model_exports_are_tensorflow_only(name, tmp_path):
    export = getattr(tfp_bnn.export, name)
    target = tmp_path / "served"
    if keras.backend.backend() != "jax":
        pytest.skip("the refusal is the JAX backend's; TensorFlow exports (tests/test_export.py)")
    with pytest.raises(RuntimeError, match=rf"tfp_bnn.export.{name} writes a TensorFlow "
                                           r"SavedModel .* KERAS_BACKEND=tensorflow"):
        export(_flipout_model(), str(target))
    assert not target.exists() and not list(tmp_path.iterdir())


_EXPORT_ON_TENSORFLOW = """
import sys, numpy as np, keras, tfp_bnn, tensorflow as tf
model = keras.saving.load_model(sys.argv[1], safe_mode=True)
tfp_bnn.export.export_saved_model(model, sys.argv[2])
served = tf.saved_model.load(sys.argv[2])
x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
np.save(sys.argv[3], served.serve_mean(tf.constant(x)).numpy())
"""


@pytest.mark.slow
def test_a_keras_file_from_this_backend_exports_under_tensorflow(tmp_path):
    model = _flipout_model()
    for weight in model.trainable_weights:
        weight.assign(weight + 0.1)
    model.save(tmp_path / "m.keras")
    tfp_bnn.set_mean_mode(model)
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    expected = keras.ops.convert_to_numpy(model(x))
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(
        [sys.executable, "-c", _EXPORT_ON_TENSORFLOW, str(tmp_path / "m.keras"),
         str(tmp_path / "served"), str(tmp_path / "out.npy")],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-5, atol=1e-6)

"""SavedModel export: served without tfp_bnn, sampling and mean endpoints."""

import json
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.export import export_saved_model
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization

X = np.random.default_rng(0).normal(size=(6, 8, 8, 1)).astype("float32")


def _model():
    return keras.Sequential([
        keras.Input((8, 8, 1)), Conv2DFlipout(3, 3, activation="relu", seed=0, kl_weight=0.1),
        keras.layers.Flatten(), DenseReparameterization(4, seed=1, kl_weight=0.1),
        DenseFlipout(2, seed=2, kl_weight=0.1),
    ])


def _serve_in_fresh_process(path, endpoint, calls=2):
    """Loads the SavedModel in a process that never imports tfp_bnn or TFP."""
    code = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        served = tf.saved_model.load({str(path)!r})
        x = np.array(json.loads(sys.stdin.read()), dtype="float32")
        outs = [getattr(served, {endpoint!r})(x).numpy().tolist() for _ in range({calls})]
        leaked = [m for m in ("tfp_bnn", "tensorflow_probability", "tf_keras") if m in sys.modules]
        print(json.dumps({{"outs": outs, "leaked": leaked}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(X.tolist()),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["leaked"] == []
    return [np.asarray(o) for o in data["outs"]]


@pytest.mark.slow
def test_keras_export_serves_and_keeps_mean_mode(tmp_path):
    model = _model()
    sampling_path, mean_path = tmp_path / "sampling", tmp_path / "mean"
    model.export(str(sampling_path), format="tf_saved_model", verbose=False)
    tfp_bnn.set_mean_mode(model)
    expected = keras.ops.convert_to_numpy(model(X))
    model.export(str(mean_path), format="tf_saved_model", verbose=False)

    a, b = _serve_in_fresh_process(sampling_path, "serve")
    assert a.shape == expected.shape and not np.allclose(a, b)
    m1, m2 = _serve_in_fresh_process(mean_path, "serve")
    np.testing.assert_allclose(m1, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m1, m2)


@pytest.mark.slow
def test_export_helper_writes_both_endpoints(tmp_path):
    model = _model()
    path = export_saved_model(model, tmp_path / "both")
    with tfp_bnn.mean_mode(model):
        expected = keras.ops.convert_to_numpy(model(X))
    m1, m2 = _serve_in_fresh_process(path, "serve_mean")
    np.testing.assert_allclose(m1, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m1, m2)
    s1, s2 = _serve_in_fresh_process(path, "serve")
    assert not np.allclose(s1, s2) and not np.allclose(s1, expected)


def test_export_helper_refuses_to_overwrite(tmp_path):
    model = _model()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("user data")
    with pytest.raises(ValueError, match="already exists"):
        export_saved_model(model, tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "user data"


def test_export_helper_needs_a_built_model(tmp_path):
    model = keras.Sequential([DenseFlipout(2, kl_weight=0.1)])
    with pytest.raises(ValueError, match="not built"):
        export_saved_model(model, tmp_path / "x")

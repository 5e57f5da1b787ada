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


# -- export_predictive: the Monte Carlo predictive as a serving signature ------

def _regression_model():
    """mean = x @ [1, -1] + 0.5 with sigma = [0.5, 0.25]; log variance = 0.3 x_0 - 1."""
    inputs = keras.Input((2,))
    bayes = DenseReparameterization(1, kl_weight=0.0, seed=0)
    log_var = keras.layers.Dense(1)
    model = keras.Model(inputs, keras.layers.Concatenate()([bayes(inputs), log_var(inputs)]))
    bayes.kernel_params[0].assign([[1.0], [-1.0]])
    bayes.kernel_params[1].assign(np.log(np.expm1([[0.5], [0.25]])))
    bayes.bias.assign([0.5])
    log_var.kernel.assign([[0.3], [0.0]])
    log_var.bias.assign([-1.0])
    return model


def _served_predictive(path, x, num_samples):
    """Calls `serve(x, num_samples)` in a process that never imports tfp_bnn or TFP."""
    code = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        served = tf.saved_model.load({str(path)!r})
        x = np.array(json.loads(sys.stdin.read()), dtype="float32")
        out = served.serve(x, tf.constant({num_samples}))
        leaked = [m for m in ("tfp_bnn", "tensorflow_probability", "tf_keras") if m in sys.modules]
        print(json.dumps({{"out": {{k: v.numpy().tolist() for k, v in out.items()}},
                           "leaked": leaked}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(x.tolist()),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["leaked"] == []
    return {k: np.asarray(v) for k, v in data["out"].items()}


@pytest.mark.slow
def test_predictive_regression_matches_closed_form_in_fresh_process(tmp_path):
    path = tfp_bnn.export.export_predictive(_regression_model(), tmp_path / "reg",
                                            samples_per_call=64)
    x = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 0.0]], "float32")
    num_samples = 4001  # not a multiple of the chunk: the last chunk is partly masked
    out = _served_predictive(path, x, num_samples)
    assert set(out) == {"mean", "stddev", "epistemic_variance", "aleatoric_variance"}
    mean = x @ np.array([[1.0], [-1.0]]) + 0.5
    epistemic = np.square(x) @ np.array([[0.25], [0.0625]])
    aleatoric = np.exp(0.3 * x[:, :1] - 1.0)
    np.testing.assert_allclose(out["aleatoric_variance"], aleatoric, rtol=1e-5)
    # 5 standard errors of a mean / a Gaussian sample variance of T draws.
    np.testing.assert_array_less(np.abs(out["mean"] - mean),
                                 5 * np.sqrt(epistemic / num_samples) + 1e-6)
    np.testing.assert_array_less(np.abs(out["epistemic_variance"] - epistemic),
                                 5 * epistemic * np.sqrt(2 / (num_samples - 1)) + 1e-7)
    np.testing.assert_allclose(out["stddev"] ** 2, out["epistemic_variance"]
                               + out["aleatoric_variance"], rtol=1e-5)
    # One sample: no spread, whatever the padded rest of the chunk drew.
    single = _served_predictive(path, x, 1)
    np.testing.assert_array_equal(single["epistemic_variance"], 0.0)


def _classifier():
    return keras.Sequential([keras.Input((4,)),
                             DenseFlipout(16, activation="relu", kl_weight=0.0, seed=0),
                             DenseFlipout(3, kl_weight=0.0, seed=1)])


@pytest.mark.slow
def test_predictive_classification_in_fresh_process(tmp_path):
    model = _classifier()
    x = np.random.default_rng(2).normal(size=(5, 4)).astype("float32") * 3
    path = tfp_bnn.export.export_predictive(model, tmp_path / "cls", task="classification",
                                            samples_per_call=8)
    out = _served_predictive(path, x, 50)
    assert out["probabilities"].shape == (5, 3)
    np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out["mutual_information"],
                               out["predictive_entropy"] - out["expected_entropy"], atol=1e-5)
    assert np.all(out["mutual_information"] >= 0) and np.any(out["mutual_information"] > 1e-3)
    # In mean mode every sample is the same network: zero mutual information and
    # the softmax of the mean network.
    tfp_bnn.set_mean_mode(model)
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model(x)))
    mean_path = tfp_bnn.export.export_predictive(model, tmp_path / "cls_mean",
                                                 task="classification")
    out = _served_predictive(mean_path, x, 30)
    np.testing.assert_allclose(out["probabilities"], expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["mutual_information"], 0.0, atol=1e-5)


def test_predictive_rejects_zero_samples_at_call_time(tmp_path):
    import tensorflow as tf

    path = tfp_bnn.export.export_predictive(_classifier(), tmp_path / "p", task="classification")
    served = tf.saved_model.load(str(path))
    x = np.zeros((2, 4), "float32")
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_samples must be >= 1"):
        served.serve(x, tf.constant(0))

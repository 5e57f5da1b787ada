"""SavedModel export: served without tfp_bnn, sampling and mean endpoints.

Every export is written in this process by the module fixture `exports`; one fresh
process that never imports tfp_bnn or TFP (`served`) loads them all and makes every
call; each test asserts on its own calls.
"""

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
X_REG = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 0.0]], "float32")
X_CLS = np.random.default_rng(2).normal(size=(5, 4)).astype("float32") * 3
REG_SAMPLES = 4001  # not a multiple of the chunk: the last chunk is partly masked
TEST_SEED = 20261120  # what tests/conftest.py resets the global seeds to before each test


def _model():
    return keras.Sequential([
        keras.Input((8, 8, 1)), Conv2DFlipout(3, 3, activation="relu", seed=0, kl_weight=0.1),
        keras.layers.Flatten(), DenseReparameterization(4, seed=1, kl_weight=0.1),
        DenseFlipout(2, seed=2, kl_weight=0.1),
    ])


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


def _classifier():
    return keras.Sequential([keras.Input((4,)),
                             DenseFlipout(16, activation="relu", kl_weight=0.0, seed=0),
                             DenseFlipout(3, kl_weight=0.0, seed=1)])


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Every SavedModel of this file, the calls to make on it, and the in-process values."""
    tmp = tmp_path_factory.mktemp("exports")
    paths, expected, calls = {}, {}, {}

    # Keras' own export, in sampling mode and then in mean mode.
    keras.utils.set_random_seed(TEST_SEED)
    model = _model()
    paths["keras_sampling"], paths["keras_mean"] = tmp / "sampling", tmp / "mean"
    model.export(str(paths["keras_sampling"]), format="tf_saved_model", verbose=False)
    tfp_bnn.set_mean_mode(model)
    expected["keras_mean"] = keras.ops.convert_to_numpy(model(X))
    model.export(str(paths["keras_mean"]), format="tf_saved_model", verbose=False)
    calls["keras_sampling"] = dict(path="keras_sampling", endpoint="serve", x=X)
    calls["keras_mean"] = dict(path="keras_mean", endpoint="serve", x=X)

    # export_saved_model: `serve` and `serve_mean` in one SavedModel.
    keras.utils.set_random_seed(TEST_SEED)
    model = _model()
    paths["both"] = export_saved_model(model, tmp / "both")
    with tfp_bnn.mean_mode(model):
        expected["both"] = keras.ops.convert_to_numpy(model(X))
    calls["both_mean"] = dict(path="both", endpoint="serve_mean", x=X)
    calls["both_sampling"] = dict(path="both", endpoint="serve", x=X)

    # export_predictive, regression: the closed form, and one sample.
    keras.utils.set_random_seed(TEST_SEED)
    paths["reg"] = tfp_bnn.export.export_predictive(_regression_model(), tmp / "reg",
                                                    samples_per_call=64)
    calls["reg"] = dict(path="reg", x=X_REG, num_samples=REG_SAMPLES)
    calls["reg_single"] = dict(path="reg", x=X_REG, num_samples=1)

    # export_predictive, classification: sampling, then mean mode.
    keras.utils.set_random_seed(TEST_SEED)
    model = _classifier()
    paths["cls"] = tfp_bnn.export.export_predictive(model, tmp / "cls", task="classification",
                                                    samples_per_call=8)
    tfp_bnn.set_mean_mode(model)
    expected["cls_mean"] = keras.ops.convert_to_numpy(keras.ops.softmax(model(X_CLS)))
    paths["cls_mean"] = tfp_bnn.export.export_predictive(model, tmp / "cls_mean",
                                                         task="classification")
    calls["cls"] = dict(path="cls", x=X_CLS, num_samples=50)
    calls["cls_mean"] = dict(path="cls_mean", x=X_CLS, num_samples=30)
    # The check runs before the loop, whatever the chunk size.
    calls["cls_zero"] = dict(path="cls", x=np.zeros((2, 4), "float32"), num_samples=0,
                             expect_error=True)
    return paths, expected, calls


_SERVE_ALL = textwrap.dedent("""
    import json, sys, traceback
    import numpy as np
    import tensorflow as tf
    request = json.loads(sys.stdin.read())
    loaded, results = {}, {}
    for name, call in request["calls"].items():
        try:
            path = request["paths"][call["path"]]
            if path not in loaded:
                loaded[path] = tf.saved_model.load(path)
            served = loaded[path]
            x = np.array(call["x"], dtype="float32")
            if "endpoint" in call:  # two calls: are they the same?
                out = {"outs": [getattr(served, call["endpoint"])(x).numpy().tolist()
                                for _ in range(2)]}
            elif call.get("expect_error"):
                try:
                    served.serve(x, tf.constant(call["num_samples"]))
                    out = {"raised": None}
                except tf.errors.InvalidArgumentError as e:
                    out = {"raised": "InvalidArgumentError", "message": str(e)}
            else:
                out = served.serve(x, tf.constant(call["num_samples"]))
                out = {"out": {k: v.numpy().tolist() for k, v in out.items()}}
        except Exception:
            out = {"error": traceback.format_exc()[-2000:]}
        out["leaked"] = [m for m in ("tfp_bnn", "tensorflow_probability", "tf_keras")
                         if m in sys.modules]
        results[name] = out
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def served(exports):
    """name -> what the fresh process returned for that call."""
    paths, _, calls = exports
    request = {"paths": {k: str(v) for k, v in paths.items()},
               "calls": {k: dict(v, x=v["x"].tolist()) for k, v in calls.items()}}
    result = subprocess.run([sys.executable, "-c", _SERVE_ALL], input=json.dumps(request),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _outs(served, name):
    """The two outputs of an endpoint call made in the fresh process."""
    data = served[name]
    assert "error" not in data, data["error"]
    assert data["leaked"] == []
    return [np.asarray(o) for o in data["outs"]]


def _predictive(served, name):
    """The dict `serve(x, num_samples)` returned in the fresh process."""
    data = served[name]
    assert "error" not in data, data["error"]
    assert data["leaked"] == []
    return {k: np.asarray(v) for k, v in data["out"].items()}


@pytest.mark.slow
def test_keras_export_serves_and_keeps_mean_mode(exports, served):
    expected = exports[1]["keras_mean"]
    a, b = _outs(served, "keras_sampling")
    assert a.shape == expected.shape and not np.allclose(a, b)
    m1, m2 = _outs(served, "keras_mean")
    np.testing.assert_allclose(m1, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m1, m2)


@pytest.mark.slow
def test_export_helper_writes_both_endpoints(exports, served):
    expected = exports[1]["both"]
    m1, m2 = _outs(served, "both_mean")
    np.testing.assert_allclose(m1, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m1, m2)
    s1, s2 = _outs(served, "both_sampling")
    assert not np.allclose(s1, s2) and not np.allclose(s1, expected)


# -- export_predictive: the Monte Carlo predictive as a serving signature ------

@pytest.mark.slow
def test_predictive_regression_matches_closed_form_in_fresh_process(served):
    x, num_samples = X_REG, REG_SAMPLES
    out = _predictive(served, "reg")
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
    single = _predictive(served, "reg_single")
    np.testing.assert_array_equal(single["epistemic_variance"], 0.0)


@pytest.mark.slow
def test_predictive_classification_in_fresh_process(exports, served):
    out = _predictive(served, "cls")
    assert out["probabilities"].shape == (5, 3)
    np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out["mutual_information"],
                               out["predictive_entropy"] - out["expected_entropy"], atol=1e-5)
    assert np.all(out["mutual_information"] >= 0) and np.any(out["mutual_information"] > 1e-3)
    # In mean mode every sample is the same network: zero mutual information and
    # the softmax of the mean network.
    out = _predictive(served, "cls_mean")
    np.testing.assert_allclose(out["probabilities"], exports[1]["cls_mean"], rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(out["mutual_information"], 0.0, atol=1e-5)


def test_predictive_rejects_zero_samples_at_call_time(served):
    data = served["cls_zero"]
    assert "error" not in data, data["error"]
    assert data["raised"] == "InvalidArgumentError", data
    assert "`num_samples` must be an int in 1..1,000,000" in data["message"]

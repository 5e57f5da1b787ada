"""export_predictive serves distribution heads; exports take dict-input models."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn import layers
from tfp_bnn.export import export_predictive
from tfp_bnn.export import export_saved_model


def _x(n=16):
    return np.random.default_rng(0).uniform(-1, 1, size=(n, 3)).astype("float32")


@pytest.mark.parametrize("head, width, task", [
    (lambda: layers.IndependentNormal(1), 2, "regression"),
    (lambda: layers.IndependentPoisson(2), 2, "regression"),
    (lambda: layers.Categorical(3), 3, "classification"),
])
def test_served_predictive_of_a_distribution_head(tmp_path, head, width, task):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), layers.DenseFlipout(width, seed=2), head()])
    x = _x()
    # Exported in mean mode every weight sample is the same, so the served and the
    # library's summaries agree exactly; the switch is a variable of the SavedModel.
    with tfp_bnn.mean_mode(model):
        served = tf.saved_model.load(export_predictive(model, str(tmp_path / "p"), task=task))
        out = served.serve(x, tf.constant(5))
        if task == "regression":
            pred = tfp_bnn.predict.distribution(model, x, num_samples=5)
            np.testing.assert_allclose(out["epistemic_variance"], 0.0, atol=1e-5)
        else:
            pred = tfp_bnn.predict.classification(model, x, num_samples=5)
        # One vocabulary: the served dict has the keys and values of the prediction's.
        expected = pred.summaries()
        assert set(out) == set(expected)
        for key, value in expected.items():
            np.testing.assert_allclose(out[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    switches = [v for v in served.variables if "sampling" in v.name]
    assert switches
    for switch in switches:
        switch.assign(1.0)
    sampled = served.serve(x, tf.constant(50))
    key = "epistemic_variance" if task == "regression" else "mutual_information"
    assert np.all(np.asarray(sampled[key]) >= 0) and np.any(np.asarray(sampled[key]) > 0)


def _dict_model():
    keras.utils.set_random_seed(3)
    a = keras.Input((3,), name="a")
    b = keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([a, b])
    out = layers.DenseFlipout(2, seed=4)(h)  # [mean, log variance]
    return keras.Model({"a": a, "b": b}, out)


def test_dict_input_models_export(tmp_path):
    model = _dict_model()
    inputs = {"a": _x(5), "b": _x(5)[:, :2]}
    served = tf.saved_model.load(export_saved_model(model, str(tmp_path / "s")))
    with tfp_bnn.mean_mode(model):
        expected = model(inputs)
    np.testing.assert_allclose(served.serve_mean(inputs), expected, rtol=1e-5)
    assert served.serve(inputs).shape == (5, 2)
    predictive = tf.saved_model.load(export_predictive(model, str(tmp_path / "p")))
    out = predictive.serve(inputs, tf.constant(20))
    pred = tfp_bnn.predict.regression(model, inputs, num_samples=20)
    assert out["mean"].shape == pred.mean.shape == (5, 1)

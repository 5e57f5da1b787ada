"""Tests of tfp_bnn.export.with_preprocessing: a wrapped model and its served predictive
take raw inputs and answer in the target's units; bad statistics are refused by name."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn.export import export_predictive
from tfp_bnn.export import with_preprocessing

X_MEAN, X_STD = np.array([100.0, -3.0, 0.5]), np.array([20.0, 2.0, 0.1])
Y_MEAN, Y_STD = 35.8, 16.7


def _point_model():
    """[mean, log variance] of a standardised target, deterministic (exact comparisons)."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(2)])


def _raw_rows():
    return (np.random.default_rng(0).normal(size=(5, 3)) * X_STD + X_MEAN).astype("float32")


def test_served_predictive_of_raw_rows_is_in_the_targets_units(tmp_path):
    model = _point_model()
    raw = _raw_rows()
    z = model.predict(((raw - X_MEAN) / X_STD).astype("float32"), verbose=0)
    wrapped = with_preprocessing(model, x_mean=X_MEAN, x_std=X_STD, y_mean=Y_MEAN, y_std=Y_STD)
    path = export_predictive(wrapped, os.path.join(tmp_path, "served"), samples_per_call=2)
    served = tf.saved_model.load(path)
    summary = served.serve(tf.constant(raw), tf.constant(3))
    # float32 rounding of the standardisation, relative to the outputs' size.
    np.testing.assert_allclose(summary["mean"].numpy()[:, 0], Y_STD * z[:, 0] + Y_MEAN,
                               rtol=1e-5)
    np.testing.assert_allclose(summary["stddev"].numpy()[:, 0], Y_STD * np.exp(z[:, 1] / 2),
                               rtol=1e-5)
    np.testing.assert_allclose(summary["epistemic_variance"].numpy(), 0.0, atol=1e-3)


def test_monte_carlo_samples_of_a_bayesian_model_are_each_rescaled():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2, seed=1)])
    wrapped = with_preprocessing(model, x_mean=X_MEAN, x_std=X_STD, y_mean=Y_MEAN, y_std=Y_STD)
    raw = _raw_rows()
    z = ((raw - X_MEAN) / X_STD).astype("float32")
    state = [v.numpy() for v in model.variables]  # weights and the noise generator's state
    inner = tfp_bnn.predict.regression(model, z, num_samples=8, output="mean_log_variance")
    for variable, value in zip(model.variables, state):
        variable.assign(value)
    outer = tfp_bnn.predict.regression(wrapped, raw, num_samples=8, output="mean_log_variance")
    # The same generator state draws the same weights: the wrapped model's samples are the
    # inner model's, rescaled one by one (float32 rounding of the standardisation).
    assert np.std(inner.sample_means, axis=0).max() > 1e-3  # the samples do differ
    np.testing.assert_allclose(outer.sample_means, Y_STD * inner.sample_means + Y_MEAN,
                               rtol=1e-4)
    np.testing.assert_allclose(outer.aleatoric_variance, Y_STD ** 2 * inner.aleatoric_variance,
                               rtol=1e-4)


def test_without_target_statistics_outputs_pass_unchanged(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                              keras.layers.Softmax()])
    wrapped = with_preprocessing(model, x_mean=X_MEAN, x_std=X_STD)
    raw = _raw_rows()
    expected = model.predict(((raw - X_MEAN) / X_STD).astype("float32"), verbose=0)
    np.testing.assert_allclose(wrapped.predict(raw, verbose=0), expected, rtol=1e-5,
                               atol=1e-7)
    path = str(tmp_path / "wrapped.keras")
    wrapped.save(path)
    loaded = tfp_bnn.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded.predict(raw, verbose=0), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kwargs, message", [
    ({"x_std": [20.0, 0.0, 1.0]}, r"^`x_std` must be > 0 \(a standard deviation\), got 0.0 "),
    ({"x_mean": [1.0, np.inf, 0.0]}, r"^`x_mean` must be finite, got inf at index 1"),
    ({"x_mean": [1.0, 2.0]}, r"^`x_mean` must be one number or one per feature \(3"),
    ({"x_std": [[1.0, 1.0, 1.0]]}, r"^`x_std` must be 1-D, got shape \(1, 3\)"),
    ({"y_mean": 1.0}, r"^`y_mean` and `y_std` go together"),
    ({"y_mean": 1.0, "y_std": -1.0}, r"^`std` must be > 0"),
    ({"y_mean": 1.0, "y_std": 1.0, "output": "distribution"}, r"^`output` must be one of"),
])
def test_bad_statistics_are_refused_in_one_line(kwargs, message):
    arguments = {"x_mean": X_MEAN, "x_std": X_STD, **kwargs}
    with pytest.raises(ValueError, match=message) as error:
        with_preprocessing(_point_model(), **arguments)
    assert "\n" not in str(error.value)


def test_a_distribution_head_is_refused_not_rescaled():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                              tfp_bnn.layers.IndependentNormal(1, seed=0)])
    with pytest.raises(ValueError, match="cannot rescale a distribution head"):
        with_preprocessing(model, x_mean=X_MEAN, x_std=X_STD, y_mean=Y_MEAN, y_std=Y_STD)


def test_a_model_with_two_outputs_is_refused():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, [keras.layers.Dense(2)(inputs), keras.layers.Dense(2)(inputs)])
    with pytest.raises(ValueError, match="single output; this one has 2 outputs"):
        with_preprocessing(model, x_mean=X_MEAN, x_std=X_STD, y_mean=Y_MEAN, y_std=Y_STD)


def test_a_subclassed_model_needs_its_input_shape():
    class Twice(keras.Model):
        def call(self, inputs):
            return 2.0 * inputs

    with pytest.raises(ValueError, match="pass `input_shape=`"):
        with_preprocessing(Twice(), x_mean=0.0, x_std=1.0)
    wrapped = with_preprocessing(Twice(), x_mean=1.0, x_std=2.0, input_shape=(2,))
    np.testing.assert_allclose(wrapped.predict(np.array([[3.0, 5.0]], "float32"), verbose=0),
                               [[2.0, 4.0]])

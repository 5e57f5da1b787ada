"""Tests of tfp_bnn.layers.TargetScaling: Keras' layer harness, the affine map per output
layout against hand computation, and a .keras round trip."""

import keras
import numpy as np
import pytest
from keras.src import testing

import tfp_bnn
from tfp_bnn.layers import TargetScaling

Z = np.array([[1.0, 0.5], [-2.0, -1.0]], "float32")


def test_keras_run_layer_test():
    testing.TestCase().run_layer_test(
        TargetScaling, {"mean": [35.8], "std": [16.7], "output": "mean_log_variance"},
        input_shape=(2, 2), expected_output_shape=(2, 2), expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=0, expected_num_seed_generators=0,
        expected_num_losses=0, supports_masking=False, run_training_check=False)


@pytest.mark.parametrize("output, second", [
    # The second column of Z in each layout, by hand: log variance + 2 log std,
    # variance * std**2, stddev * std.
    ("mean_log_variance", lambda v, std: v + 2.0 * np.log(std)),
    ("mean_variance", lambda v, std: v * std ** 2),
    ("mean_stddev", lambda v, std: v * std),
])
def test_mean_and_spread_in_data_units(output, second):
    mean, std = 35.8, 16.7
    y = keras.ops.convert_to_numpy(TargetScaling(mean, std, output=output)(Z))
    np.testing.assert_allclose(y[:, 0], std * Z[:, 0] + mean, rtol=1e-6)
    np.testing.assert_allclose(y[:, 1], second(Z[:, 1].astype(np.float64), std), rtol=1e-6)


def test_mean_layout_scales_every_column_and_per_target_statistics():
    samples = np.array([[[1.0, 2.0]], [[3.0, -1.0]]], "float32")  # [S, B, D]: sampled values
    y = keras.ops.convert_to_numpy(TargetScaling([1.0, -5.0], [2.0, 0.5])(samples))
    np.testing.assert_allclose(y, samples * np.array([2.0, 0.5]) + np.array([1.0, -5.0]))


def test_config_round_trip_and_keras_file(tmp_path):
    layer = TargetScaling(35.8, 16.7, output="mean_variance", name="scale")
    clone = TargetScaling.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    model = keras.Sequential([keras.Input((2,)), layer])
    path = str(tmp_path / "scaled.keras")
    model.save(path)
    loaded = tfp_bnn.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(loaded.predict(Z, verbose=0), model.predict(Z, verbose=0))
    assert isinstance(loaded.layers[-1], TargetScaling)


@pytest.mark.parametrize("kwargs, message", [
    ({"std": 0.0}, r"`std` must be > 0"),
    ({"std": [1.0, -2.0]}, r"`std` must be > 0.*-2.0 at index 1"),
    ({"mean": float("nan")}, r"`mean` must be finite"),
    ({"output": "distribution"}, r"`output` must be one of"),
    ({"mean": [0.0, 1.0], "std": [1.0, 1.0, 1.0]}, r"one value per target"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TargetScaling(**kwargs)


def test_outputs_that_do_not_fit_the_layout_are_refused():
    with pytest.raises(ValueError, match=r"even 2D values, got 3"):
        TargetScaling(output="mean_log_variance")(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match=r"statistics for 2 targets.*holds 1"):
        TargetScaling([0.0, 1.0], 1.0, output="mean_variance")(np.zeros((2, 2), "float32"))

"""Tests of `calibrated`: the calibrator inside `tfp_bnn.predict`, `export_predictive`,
`model.save`, on a deterministic and a Bayesian classifier and a heteroscedastic regressor."""

import keras
import numpy as np
import pytest
from scipy import special

import tfp_bnn
from tests.calibration.calibration_cases import overconfident
from tfp_bnn.calibration import TemperatureScaling
from tfp_bnn.calibration import VarianceScaling
from tfp_bnn.calibration import calibrated


def _classifier(layer, classes=4, seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((classes,))
    return keras.Model(inputs, layer(inputs))


@pytest.fixture(scope="module")
def overconfident_data():
    logits, labels = overconfident(rows=400, classes=4, seed=3)
    return logits[0].astype("float32"), labels


@pytest.mark.jax
def test_a_deterministic_classifier_is_predicted_through_its_temperature(overconfident_data):
    # The "network" returns its inputs times 2: logits that are twice too sharp and more.
    x, labels = overconfident_data
    model = _classifier(keras.layers.Dense(4, use_bias=False,
                                           kernel_initializer=keras.initializers.Identity(2.0)))
    scaling = TemperatureScaling().fit_predictive(model, x, labels, num_samples=1)
    model_t = calibrated(model, scaling)
    assert model_t.layers[-1] is scaling and model_t.name == f"{model.name}_calibrated"
    prediction = tfp_bnn.predict.classification(model_t, x, num_samples=1)
    np.testing.assert_allclose(prediction.probs, special.softmax(2.0 * x / scaling.temperature,
                                                                 axis=-1), rtol=1e-4, atol=1e-6)
    before = tfp_bnn.predict.classification(model, x, num_samples=1)
    assert prediction.nll(labels) < before.nll(labels) - 0.1
    np.testing.assert_allclose(prediction.nll(labels), scaling.fit_result["nll_after"],
                               rtol=1e-4)


def test_a_bayesian_classifier_is_calibrated_on_its_monte_carlo_predictive(overconfident_data,
                                                                          tmp_path):
    x, labels = overconfident_data
    flipout = tfp_bnn.layers.DenseFlipout(4, kernel_initializer=keras.initializers.Identity(3.0),
                                          seed=1)
    model = _classifier(flipout)
    scaling = TemperatureScaling().fit_predictive(model, x, labels, num_samples=30)
    model_t = calibrated(model, scaling)
    before = tfp_bnn.predict.classification(model, x, num_samples=200).nll(labels)
    after = tfp_bnn.predict.classification(model_t, x, num_samples=200).nll(labels)
    # The fitted NLL was measured on 30 samples; 200 new ones move it by Monte Carlo
    # noise only, far below the gain of cooling 3x-sharpened logits.
    assert after < before - 0.2
    assert after == pytest.approx(scaling.fit_result["nll_after"], abs=0.05)
    # Saved and loaded (safe mode), then exported: the same temperature serves.
    model_t.save(tmp_path / "cal.keras")
    loaded = tfp_bnn.load_model(tmp_path / "cal.keras")
    assert loaded.layers[-1].temperature == scaling.temperature
    served = tfp_bnn.export.export_predictive(loaded, tmp_path / "served",
                                              task="classification")
    import tensorflow as tf
    endpoint = tf.saved_model.load(str(served))  # kept: its variables live with it
    probs = endpoint.serve(x, tf.constant(200))["probabilities"]
    nll = -np.mean(np.log(probs.numpy()[np.arange(len(labels)), labels]))
    assert nll == pytest.approx(after, abs=0.05)


@pytest.mark.jax
def test_a_heteroscedastic_regressor_is_predicted_with_its_scaled_noise():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 1)).astype("float32")
    y = 3.0 * x[:, 0] + 2.0 * rng.normal(size=300)  # noise sd 2; the head claims sd 1
    keras.utils.set_random_seed(0)
    inputs = keras.Input((1,))
    head = keras.layers.Dense(2, kernel_initializer=keras.initializers.Constant([[3.0, 0.0]]),
                              bias_initializer="zeros")
    model = keras.Model(inputs, head(inputs))
    scaling = VarianceScaling().fit_predictive(model, x, y, num_samples=1)
    assert 3.0 < scaling.variance_factor[0] < 5.0
    prediction = tfp_bnn.predict.regression(calibrated(model, scaling), x, num_samples=1)
    np.testing.assert_allclose(prediction.total_variance[:, 0], scaling.variance_factor[0],
                               rtol=1e-5)


def test_a_subclassed_model_is_wrapped_and_bad_arguments_are_refused(overconfident_data):
    x, labels = overconfident_data

    class Twice(keras.Model):
        def call(self, inputs):
            return 2.0 * inputs
    model = Twice()
    model(x[:2])
    scaling = TemperatureScaling().fit(2.0 * x, labels)
    wrapped = calibrated(model, scaling)
    assert isinstance(wrapped, keras.Sequential)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(wrapped(x[:3])),
                               2.0 * x[:3] / scaling.temperature, rtol=1e-5)
    with pytest.raises(ValueError, match="`model` must be a built keras.Model"):
        calibrated("model", scaling)
    with pytest.raises(ValueError, match="`calibrator` must be a tfp_bnn.calibration layer"):
        calibrated(model, keras.layers.Dense(2))
    with pytest.raises(ValueError, match="not fitted"):
        calibrated(model, TemperatureScaling())


@pytest.mark.jax
def test_a_deep_ensemble_is_calibrated_on_its_exact_mixture(overconfident_data):
    x, labels = overconfident_data
    members = []
    for m in range(3):
        inputs = keras.Input((4,))
        members.append(keras.Model(inputs, keras.layers.Dense(
            4, use_bias=False, kernel_initializer=keras.initializers.Identity(2.0 + m))(inputs)))
    ensemble = tfp_bnn.ensembles.deep_ensemble(members)
    scaling = TemperatureScaling().fit_predictive(ensemble, x, labels, num_samples=3)
    # The mixture of the three members' softmax(c_m x / T), minimised over T apart.
    from scipy import optimize

    def nll(log_t):
        probs = np.mean([special.softmax((2.0 + m) * x / np.exp(log_t), axis=-1)
                         for m in range(3)], axis=0)
        return -np.mean(np.log(probs[np.arange(len(labels)), labels]))
    found = optimize.minimize_scalar(nll, bounds=(-3, 5), method="bounded",
                                     options={"xatol": 1e-10})
    assert scaling.temperature == pytest.approx(np.exp(found.x), rel=1e-4)
    prediction = tfp_bnn.predict.classification(calibrated(ensemble, scaling), x, num_samples=3)
    assert prediction.nll(labels) == pytest.approx(found.fun, rel=1e-4)

"""MeanRMSE scores the mean columns of a [means, log variances] output only."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.layers import HeteroscedasticRegression
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.metrics import MeanRMSE

pytestmark = pytest.mark.jax


def _batches(units, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(10, units)).astype("float32")
    pred = np.concatenate([y + rng.normal(size=(10, units)), rng.normal(size=(10, units)) * 5],
                          axis=-1).astype("float32")
    return y, pred


@pytest.mark.parametrize("units", [1, 2])
def test_streams_the_rmse_of_the_means(units):
    y, pred = _batches(units)
    metric = MeanRMSE()
    metric.update_state(y[:4], pred[:4])
    metric.update_state(y[4:], pred[4:])
    expected = np.sqrt(np.mean((y.astype(np.float64) - pred[:, :units]) ** 2))
    assert float(metric.result()) == pytest.approx(expected, rel=1e-6)
    # Keras' own metric mixes the log-variance columns in.
    keras_rmse = keras.metrics.RootMeanSquaredError()
    keras_rmse.update_state(np.concatenate([y, y], -1), pred)
    assert abs(float(keras_rmse.result()) - expected) > 0.5
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_flat_targets_and_sample_weights():
    y, pred = _batches(1, seed=1)
    weights = np.linspace(0.0, 2.0, 10).astype("float32")
    metric = MeanRMSE()
    metric.update_state(y[:, 0], pred, sample_weight=weights)
    residual = y[:, 0].astype(np.float64) - pred[:, 0]
    expected = np.sqrt(np.sum(weights * residual**2) / np.sum(weights))
    assert float(metric.result()) == pytest.approx(expected, rel=1e-6)
    metric.reset_state()
    metric.update_state(y, pred, sample_weight=weights[:, None])
    assert float(metric.result()) == pytest.approx(expected, rel=1e-6)


def test_float16_outputs_are_scored_in_float32():
    metric = MeanRMSE()
    metric.update_state(np.zeros((2, 1), "float16"), np.float16([[1000.0, 0.0], [1000.0, 0.0]]))
    assert float(metric.result()) == pytest.approx(1000.0)  # 1000^2 overflows float16


def test_in_compile_it_scores_the_mean_and_round_trips():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 3)).astype("float32")
    y = x @ np.float32([[1.0], [2.0], [-1.0]])
    model = keras.Sequential([keras.Input((3,)), HeteroscedasticRegression(1)])
    model.compile("adam", GaussianNLL(), metrics=[MeanRMSE()])
    loss, rmse = model.evaluate(x, y, batch_size=16, verbose=0)
    mean = model.predict(x, verbose=0)[:, 0]
    assert rmse == pytest.approx(np.sqrt(np.mean((y[:, 0] - mean) ** 2)), rel=1e-5)
    assert np.isfinite(loss)
    clone = keras.metrics.deserialize(keras.metrics.serialize(MeanRMSE(name="rmse")))
    assert isinstance(clone, MeanRMSE) and clone.name == "rmse"
    assert tfp_bnn.metrics.MeanRMSE is MeanRMSE


def test_rejects_an_odd_last_axis():
    with pytest.raises(ValueError, match="even last axis"):
        MeanRMSE().update_state(np.zeros((2, 1)), np.zeros((2, 3)))

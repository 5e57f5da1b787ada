"""Variational layers leave what Keras returns as it is for `keras.layers.Dense`.

Each layer's KL tracker (tfp_bnn/layers/_kl_tracking.py) stays out of
`model.metrics`, so `evaluate`, `train_on_batch`, `test_on_batch` and the
`fit` history have the structure of an equivalent plain Keras model; the KL
shows up only through `KLScheduler`. The KL itself is a `KLRegularizer` on
one of the layer's variables, beside the user's own regularizers.
"""

import keras
import numpy as np
import pytest

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import NodeDense
from tfp_bnn.layers._kl_tracking import KLRegularizer

N = 32


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 3)).astype("float32")
    return x, (x[:, :1] > 0).astype("float32")


def _model(bayesian, metrics, jit_compile=False):
    if bayesian:
        hidden = [DenseFlipout(4, activation="relu", kl_weight=1 / N, seed=0),
                  NodeDense(4, activation="relu", kl_weight=1 / N, seed=1)]
        last = DenseReparameterization(1, activation="sigmoid", kl_weight=1 / N, seed=2)
    else:
        hidden = [keras.layers.Dense(4, activation="relu"),
                  keras.layers.Dense(4, activation="relu")]
        last = keras.layers.Dense(1, activation="sigmoid")
    model = keras.Sequential([keras.Input((3,)), *hidden, last])
    model.compile("adam", "binary_crossentropy", metrics=list(metrics), jit_compile=jit_compile)
    return model


def _structure(value):
    if isinstance(value, dict):
        return sorted(value)
    if isinstance(value, (list, tuple)):
        return [_structure(v) for v in value]
    return "scalar" if np.ndim(value) == 0 else np.shape(value)


def _returns(model, x, y, callbacks=None):
    return {
        "evaluate": model.evaluate(x, y, verbose=0, callbacks=callbacks),
        "evaluate_dict": model.evaluate(x, y, verbose=0, return_dict=True, callbacks=callbacks),
        "train_on_batch": model.train_on_batch(x, y),
        "train_on_batch_dict": model.train_on_batch(x, y, return_dict=True),
        "test_on_batch": model.test_on_batch(x, y),
        "test_on_batch_dict": model.test_on_batch(x, y, return_dict=True),
        "metrics_names": model.metrics_names,
    }


@pytest.mark.parametrize("metrics", [(), ("accuracy",), ("accuracy", "mse")],
                         ids=["no_metric", "one_metric", "two_metrics"])
def test_return_values_have_the_structure_of_a_plain_keras_model(data, metrics):
    x, y = data
    plain = _returns(_model(False, metrics), x, y)
    model = _model(True, metrics)
    ours = _returns(model, x, y)
    for key in plain:
        assert _structure(ours[key]) == _structure(plain[key]), key
    if len(metrics) == 1:
        loss, accuracy = model.evaluate(x, y, verbose=0)
        assert np.isfinite(loss) and 0.0 <= accuracy <= 1.0


def test_no_layer_reports_its_tracker_as_a_metric(data):
    x, _ = data
    model = _model(True, ("accuracy",))
    model(x)
    for layer in model.layers:
        assert layer.metrics == []
        # The tracker still logs the KL term read from the losses.
        penalty = float(layer.losses[0])
        assert float(layer.kl_tracker.result()) == pytest.approx(penalty, rel=1e-6)
    assert not any(name.endswith("_kl") for name in model.metrics_names)


def test_evaluate_with_a_scheduler_returns_what_keras_returns(data):
    x, y = data
    model = _model(True, ("accuracy",), jit_compile=True)
    scheduler = [KLScheduler(N)]
    plain = model.evaluate(x, y, verbose=0)
    with_callback = model.evaluate(x, y, verbose=0, callbacks=scheduler)
    assert _structure(with_callback) == _structure(plain) == ["scalar", "scalar"]
    as_dict = model.evaluate(x, y, verbose=0, return_dict=True, callbacks=scheduler)
    # Only the callbacks' logs gain the KL entries; the dict stays Keras' own.
    assert sorted(as_dict) == ["accuracy", "loss"]


def test_fit_history_gains_only_the_scheduler_entries(data):
    x, y = data
    kwargs = {"epochs": 1, "batch_size": 8, "validation_split": 0.25, "verbose": 0}
    plain = _model(False, ("accuracy",)).fit(x, y, **kwargs).history
    bare = _model(True, ("accuracy",)).fit(x, y, **kwargs).history
    assert sorted(bare) == sorted(plain)
    model = _model(True, ("accuracy",))
    scheduled = model.fit(x, y, callbacks=[KLScheduler(24)], **kwargs).history
    extra = {"kl", "data_loss", "val_kl", "val_data_loss", "kl_weight"}
    assert set(scheduled) == set(plain) | extra
    for prefix in ("", "val_"):
        np.testing.assert_allclose(
            np.add(scheduled[f"{prefix}kl"], scheduled[f"{prefix}data_loss"]),
            scheduled[f"{prefix}loss"], rtol=1e-5)
    # The validation KL is this epoch's weighted KL (analytic for the Dense
    # layers, closed form for the nodes): 1/24 of the layers' divergences.
    exact = sum(float(layer.kl_divergence()) for layer in model.layers) / 24
    assert scheduled["val_kl"][-1] == pytest.approx(exact, rel=1e-4)


# -- the KLRegularizer ------------------------------------------------------------
def _analytic_penalty(layer):
    return float(keras.ops.convert_to_numpy(layer.kl_weight)) * float(
        keras.ops.convert_to_numpy(layer.kl_divergence()))


def test_the_kl_joins_the_user_regularizers_without_replacing_them():
    x = np.ones((2, 3), "float32")
    layer = DenseFlipout(4, kernel_regularizer=keras.regularizers.L2(0.5), kl_weight=0.1, seed=0)
    layer(x)
    loc = keras.ops.convert_to_numpy(layer.kernel_params[0])
    l2 = 0.5 * float(np.sum(loc**2))
    losses = [float(keras.ops.convert_to_numpy(t)) for t in layer.losses]
    # The KL sits on a variable without a regularizer: the user's stays its own term.
    assert len(losses) == 2
    assert sorted(losses) == pytest.approx(sorted([l2, _analytic_penalty(layer)]), rel=1e-5)
    assert layer.get_config()["kernel_regularizer"]["class_name"] == "L2"
    # Every trainable variable regularized: the KL wraps the first one's regularizer.
    both = DenseFlipout(4, kl_weight=0.1, seed=0)
    both.build((None, 3))
    for variable in both.trainable_weights:
        variable.regularizer = keras.regularizers.L2(0.5)
    both(x)
    expected = sum(0.5 * float(np.sum(keras.ops.convert_to_numpy(v) ** 2))
                   for v in both.trainable_weights) + _analytic_penalty(both)
    terms = both.losses
    assert len(terms) == len(both.trainable_weights)
    assert sum(float(keras.ops.convert_to_numpy(t)) for t in terms) == pytest.approx(
        expected, rel=1e-5)
    assert both.get_config()["kernel_regularizer"] is None


def test_the_kl_is_computed_from_the_values_keras_hands_a_stateless_call():
    # Inside a stateless call Keras reads every variable at the value it was
    # handed (JAX's training step; on JAX the fit test of a shared layer in
    # tests/integration/test_kl_once_per_layer.py shows a KLScheduler weight
    # reaching it): kl_weight and the posterior parameters of that step reach the KL.
    layer = DenseReparameterization(2, kl_weight=0.1, seed=0)
    x = np.ones((2, 3), "float32")
    layer(x)
    penalty = _analytic_penalty(layer)
    non_trainable = [keras.ops.convert_to_numpy(v) * (3.0 if v is layer.kl_weight else 1.0)
                     for v in layer.non_trainable_variables]
    trainable = [keras.ops.convert_to_numpy(v) for v in layer.trainable_variables]
    _, _, losses = layer.stateless_call(trainable, non_trainable, x, return_losses=True)
    assert len(losses) == 1
    assert float(keras.ops.convert_to_numpy(losses[0])) == pytest.approx(3 * penalty, rel=1e-5)
    # The variable itself is unchanged.
    assert float(keras.ops.convert_to_numpy(layer.kl_weight)) == pytest.approx(0.1)


def test_kl_regularizer_config_keeps_only_the_user_regularizer():
    regularizer = KLRegularizer(regularizer=keras.regularizers.L1(0.25))
    restored = keras.regularizers.deserialize(keras.regularizers.serialize(regularizer))
    assert isinstance(restored, KLRegularizer) and restored.layer is None
    assert float(restored(keras.ops.ones((2, 2)))) == pytest.approx(1.0)

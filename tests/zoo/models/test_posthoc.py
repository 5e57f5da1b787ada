"""Tests of zoo.models.posthoc: a trained digits CNN made Bayesian by MOPED and by Laplace."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.data.digits import load_digits
from tfp_bnn.laplace import LaplaceDense
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from zoo.models import digits as digits_models
from zoo.models import posthoc

pytest.importorskip("sklearn")

TINY = {"filters": (4, 8), "hidden_units": (16,)}  # a tiny CNN of the same shape
EPOCHS = 2


@pytest.fixture(scope="module")
def data():
    # A quarter of the training digits keeps the fits short.
    full = load_digits(seed=0)
    return {"x_train": full["x_train"][::4], "y_train": full["y_train"][::4],
            "x_test": full["x_test"][:64]}


@pytest.fixture(scope="module")
def stage1(data):
    """The deterministic CNN exactly as the covariate-shift row trains it (tiny)."""
    return digits_models.BuildAndTrain(digits_models.deterministic_cnn, **TINY)(
        data, epochs=EPOCHS, seed=0)


@pytest.fixture(scope="module")
def stage1_weights(stage1):
    return [w.copy() for w in stage1.model.get_weights()]


@pytest.fixture(scope="module")
def laplace(data, stage1, stage1_weights):
    # Trains its own stage 1: the same seed must give the fixture's network.
    return posthoc.laplace_cnn(data, epochs=EPOCHS, seed=0, hessian="kron", **TINY)


@pytest.fixture(scope="module")
def bayesianized(data, stage1, stage1_weights):
    # With `pretrained` the batch size is the fine-tuning's alone: 3 steps keep it short.
    return posthoc.bayesianized_cnn(data, epochs=EPOCHS, batch_size=120, seed=0,
                                    pretrained=stage1, delta=0.1, finetune_epochs=1)


def _logits(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def test_conversion_reproduces_the_deterministic_logits_in_mean_mode(data, stage1):
    bnn, history = posthoc.moped_finetune(stage1.model, data, delta=0.1, epochs=0, seed=0)
    assert history is None
    kinds = [type(layer) for layer in tfp_bnn.bayesian_layers(bnn)]
    assert kinds == [Conv2DFlipout, Conv2DFlipout, DenseFlipout, DenseFlipout]
    x = data["x_test"]
    with tfp_bnn.mean_mode(bnn):
        mean_logits = _logits(bnn, x)
    # float32 logits of magnitude ~10 through the same ops: a few ulps.
    np.testing.assert_allclose(mean_logits, _logits(stage1.model, x), rtol=1e-5, atol=1e-5)
    # Sampling mode draws weights around them: the logits move.
    assert np.max(np.abs(_logits(bnn, x) - mean_logits)) > 1e-3


def test_moped_posterior_starts_at_delta_times_the_trained_weights(data, stage1):
    bnn, _ = posthoc.moped_finetune(stage1.model, data, delta=0.03, epochs=0, seed=0)
    head = tfp_bnn.bayesian_layers(bnn)[-1]
    trained = stage1.model.layers[-1].kernel.numpy()
    posterior = head.kernel_posterior
    np.testing.assert_allclose(posterior.mean().numpy(), trained, rtol=1e-6)
    # softplus(softplus^-1(s)) in float32: relative error ~1e-6 except near the 1e-20 floor.
    np.testing.assert_allclose(posterior.stddev().numpy(), 0.03 * np.abs(trained), rtol=1e-4,
                               atol=1e-7)


def test_bayesianized_fine_tunes_the_elbo_and_leaves_stage1_alone(data, bayesianized, stage1,
                                                                 stage1_weights):
    history = bayesianized.history.history
    assert len(history["loss"]) == 1 and "kl" in history
    assert history["kl_weight"] == [pytest.approx(1 / len(data["x_train"]))]
    assert bayesianized.details["delta"] == 0.1
    assert bayesianized.details["finetune_epochs"] == 1
    assert bayesianized.details["posthoc_seconds"] > 0
    # The fine-tuning moved the posterior means away from the MOPED start...
    head = tfp_bnn.bayesian_layers(bayesianized.model)[-1]
    start = stage1_weights[-2]
    assert np.max(np.abs(head.kernel_posterior.mean().numpy() - start)) > 1e-4
    # ...and trained a new model: the pretrained network is unchanged.
    for before, after in zip(stage1_weights, stage1.model.get_weights()):
        np.testing.assert_array_equal(before, after)


def test_same_seed_trains_the_same_stage1_as_the_deterministic_row(laplace, stage1_weights):
    features = [layer for layer in laplace.model.layers
                if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))]
    weights = [w for layer in features for w in layer.get_weights()]
    assert len(weights) == len(stage1_weights) - 2  # all but the replaced head
    for mine, theirs in zip(weights, stage1_weights):
        np.testing.assert_array_equal(mine, theirs)


def test_laplace_head_predicts_the_trained_logits_in_mean_mode(data, laplace, stage1):
    [head] = tfp_bnn.bayesian_layers(laplace.model)
    assert isinstance(head, LaplaceDense)
    assert laplace.history is not None and len(laplace.history.history["loss"]) == EPOCHS
    assert laplace.details["prior_precision"] > 0 and laplace.details["posthoc_seconds"] > 0
    x = data["x_test"]
    with tfp_bnn.mean_mode(laplace.model):
        mean_logits = _logits(laplace.model, x)
    np.testing.assert_allclose(mean_logits, _logits(stage1.model, x), rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(_logits(laplace.model, x) - mean_logits)) > 1e-4


def test_laplace_with_pretrained_shares_its_features(data, stage1):
    trained = posthoc.laplace_cnn(data, pretrained=stage1, hessian="kron")
    assert trained.history is stage1.history
    shared = {id(layer) for layer in stage1.model.layers[:-1]}
    assert shared <= {id(layer) for layer in trained.model.layers}


def test_bad_arguments(data, stage1):
    with pytest.raises(ValueError, match="`pretrained` must be the zoo.models.digits.Trained"):
        posthoc.laplace_cnn(data, pretrained=stage1.model)
    with pytest.raises(ValueError, match=r"builder overrides \['filters'\] would not apply"):
        posthoc.bayesianized_cnn(data, pretrained=stage1, filters=(2, 2))
    with pytest.raises(ValueError, match="epochs"):
        posthoc.moped_finetune(stage1.model, data, epochs=-1)
    with pytest.raises(ValueError, match="delta"):
        posthoc.moped_finetune(stage1.model, data, delta=0.0)
    with pytest.raises(ValueError, match="hessian"):
        posthoc.laplace_head(stage1.model, data, hessian="diagonal")

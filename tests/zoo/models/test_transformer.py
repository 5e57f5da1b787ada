"""Tests of zoo.models.transformer: the two training paths of one network."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import tfp_bnn
from zoo.models import transformer as transformer_models
from zoo.run import scoring

J = 6


def _data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, J)).astype("float32")
    y = (x[:, -1] * 0.8 + 0.1 * rng.normal(size=n)).astype("float32")
    return x, y


def _pair(pooling="last", mode="diagonal"):
    mc = transformer_models.build(J, "mc", pooling=pooling, width=8, num_heads=2, ff_dim=16)
    moments = transformer_models.build(J, "moments", pooling=pooling, width=8, num_heads=2,
                                       ff_dim=16, mode=mode)
    moments.set_weights(mc.get_weights())
    return mc, moments


@pytest.mark.parametrize("pooling, mode", [("last", "diagonal"), ("mean", "full")])
def test_in_mean_mode_the_moment_path_is_the_network_itself(pooling, mode):
    # With every posterior variance zero the propagated moments are those of a
    # constant: the mean must be the mean-mode forward pass, the variance the noise.
    mc, moments = _pair(pooling, mode)
    x, _ = _data(8)
    tfp_bnn.set_mean_mode(mc, True)
    tfp_bnn.set_mean_mode(moments, True)
    expected = mc(x, training=False).numpy()
    got = moments(x, training=False).numpy()
    np.testing.assert_allclose(got[:, 0], expected[:, 0], rtol=1e-4, atol=1e-5)
    variance = np.exp(got[:, 1]) if mode == "diagonal" else got[:, 1]
    np.testing.assert_allclose(variance, np.exp(mc.log_noise.numpy()), rtol=1e-4)


def test_moment_path_adds_the_kl_of_every_variational_layer():
    _, moments = _pair()
    x, _ = _data(4)
    moments(x)
    layers = [layer for layer in tfp_bnn.bayesian_layers(moments) if hasattr(layer, "kl_weight")]
    assert len(layers) == 9  # 4 projections, 2 norms, 2 FFN layers, the head
    expected = sum(float(layer.kl_weight * layer.kl_divergence()) for layer in layers)
    assert len(moments.losses) == len(layers)
    assert float(sum(moments.losses)) == pytest.approx(expected, rel=1e-5)


def test_moment_variance_exceeds_the_noise_and_tracks_sampling():
    mc, moments = _pair()
    x, _ = _data(16)
    out = moments(x).numpy()
    noise = float(np.exp(mc.log_noise.numpy()))
    assert np.all(np.exp(out[:, 1]) > noise)
    prediction = tfp_bnn.predict.regression(mc, x, num_samples=400)
    # Means agree to within a few Monte Carlo standard errors plus the Taylor bias.
    mc_mean = prediction.mean.reshape(-1)
    se = np.sqrt(prediction.epistemic_variance.reshape(-1) / 400)
    assert np.all(np.abs(out[:, 0] - mc_mean) <= 5 * se + 0.05 * np.abs(mc_mean) + 1e-3)
    # Propagated / sampled epistemic variance per point. T = 400 gives the
    # sampled variance a relative s.e. of sqrt(2/400) = 7%; the rest is the
    # diagonal mode's approximations (measured: 0.47-1.71, median 1.1).
    ratio = (np.exp(out[:, 1]) - noise) / prediction.epistemic_variance.reshape(-1)
    assert np.all((ratio > 0.35) & (ratio < 2.5)), ratio
    assert 0.8 < np.median(ratio) < 1.4, ratio


# On JAX the moment path (the sampled one is the block's own fit test).
@pytest.mark.parametrize("path", ["mc", pytest.param("moments", marks=pytest.mark.jax)])
def test_both_paths_train_with_fit(path):
    x, y = _data(128)
    model = transformer_models.build(J, path, width=8, num_heads=2, ff_dim=16,
                                     learning_rate=1e-2)
    history, seconds = scoring.fit(model, x, y, epochs=6, batch_size=32, seed=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and seconds > 0
    # Both paths put the KL in the loss and in the `kl` log (KLScheduler).
    kl = history.history["kl"]
    assert kl[-1] > 0
    np.testing.assert_allclose(history.history["data_loss"], np.subtract(losses, kl), rtol=1e-5)
    assert np.mean(losses[-2:]) < losses[0]
    # Prediction and scores of both paths: test_transformer_compare.py's short run
    # (a prediction traced here would cost more than the training).


def test_full_mode_trains_a_joint_forecast_with_the_cholesky_likelihood():
    # Two outputs that share their noise source: the full mode's loss is the
    # joint Gaussian NLL of both (seed 000, eq. 13) under the propagated 2x2
    # covariance plus the noise.
    x, y = _data(128)
    targets = np.stack([y, 0.5 * y], axis=-1)
    model = transformer_models.build(J, "moments", horizon=2, mode="full", width=8,
                                     num_heads=2, ff_dim=16, learning_rate=1e-2)
    out = model(x[:4]).numpy()
    assert out.shape == (4, 2 + 4)
    cov = out[:, 2:].reshape(4, 2, 2)
    np.testing.assert_allclose(cov, cov.transpose(0, 2, 1), rtol=1e-5, atol=1e-7)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    # The compiled loss is the multivariate normal NLL of that covariance.
    loss = tfp_bnn.losses.MomentGaussianNLL("full", jitter=0.0, reduction=None)
    import tensorflow_probability as tfp
    reference = -tfp.distributions.MultivariateNormalTriL(
        out[:, :2].astype("float64"), tf.linalg.cholesky(cov.astype("float64"))).log_prob(
        targets[:4].astype("float64"))
    np.testing.assert_allclose(loss(targets[:4], out).numpy(), reference, rtol=1e-4)
    history, _ = scoring.fit(model, x, targets, epochs=6, batch_size=32, seed=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and np.mean(losses[-2:]) < losses[0]
    prediction, _ = scoring.predict(model, x[:10])
    assert prediction.mean.shape == (10, 2)


def test_saved_model_file_round_trips(tmp_path):
    _, moments = _pair(mode="full")
    x, _ = _data(4)
    before = moments(x).numpy()
    path = tmp_path / "transformer.keras"
    moments.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert loaded.get_config() == moments.get_config()
    np.testing.assert_allclose(loaded(x).numpy(), before, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_tokens": 0}, "num_tokens"),
    ({"horizon": 0}, "horizon"),
    ({"width": 10, "num_heads": 3}, "multiple of `num_heads`"),
    ({"pooling": "max"}, "pooling"),
    ({"path": "sampling"}, "path"),
    ({"mode": "dense"}, "mode"),
    ({"estimator": "lrt"}, "estimator"),
    ({"seed": -1}, "seed"),
])
def test_bad_arguments_are_named(kwargs, match):
    arguments = {"num_tokens": J, **kwargs}
    with pytest.raises(ValueError, match=match):
        transformer_models.TokenTransformerRegressor(**arguments)


def test_compiled_moment_forward_under_xla():
    _, moments = _pair()
    x, _ = _data(4)
    forward = tf.function(lambda inputs: moments(inputs), jit_compile=True)
    np.testing.assert_allclose(forward(x).numpy(), moments(x).numpy(), rtol=1e-4, atol=1e-5)


# --- the registry's builder, `bayesian_transformer` ---------------------------------------

@pytest.mark.parametrize("shape, pooling", [((8,), "mean"), ((24, 1), "last")])
def test_bayesian_transformer_is_sampling_free_regression(shape, pooling):
    import zoo  # noqa: PLC0415

    assert zoo.get_spec("bayesian_transformer").sampling_free
    assert zoo.get_spec("bayesian_transformer").tasks == ("regression",)
    model = zoo.build_model("bayesian_transformer", shape, num_train=16)
    assert model.training_path == "moments" and model.mode == "diagonal"
    assert model.pooling == pooling and model.num_tokens == shape[0]
    # No Monte Carlo: in sampling mode too, one pass is the predictive.
    x = np.random.default_rng(0).normal(size=(16, *shape)).astype("float32")
    np.testing.assert_array_equal(model(x, training=False), model(x, training=False))


@pytest.mark.parametrize("input_shape", [(8, 8, 1), (24, 2), (4, 4, 4, 1)])
def test_bayesian_transformer_needs_scalar_tokens(input_shape):
    with pytest.raises(ValueError, match="input_shape") as info:
        transformer_models.bayesian_transformer(input_shape, num_train=10)
    assert str(input_shape) in str(info.value)


def test_bayesian_transformer_rejects_classification():
    # The registry refuses the task first (test_registry.py); the builder refuses it too.
    with pytest.raises(ValueError, match="regression"):
        transformer_models.bayesian_transformer((8,), task="classification", num_classes=3,
                                                num_train=10)

"""Posteriors: parameterisation, initialisation, sampling, serialization."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import noise
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import DenseReparameterization


def _built_layer(**kwargs):
    layer = DenseReparameterization(200, **kwargs)
    layer.build((None, 50))
    return layer


@pytest.mark.jax
def test_sigma_is_softplus_rho():
    layer = _built_layer(kl_weight=1.0)
    loc, rho = layer.kernel_params
    _, scale = layer.posterior.prepare(layer.kernel_params)
    np.testing.assert_allclose(scale, np.log1p(np.exp(rho.numpy())), rtol=1e-6)
    q = layer.kernel_posterior
    assert tuple(q.event_shape) == (50, 200)
    np.testing.assert_allclose(q.mean(), loc.numpy())


@pytest.mark.jax
def test_initialisation_is_close_to_a_point_mass():
    layer = _built_layer(kl_weight=1.0, seed=0)
    rho = layer.kernel_params[1].numpy()
    # 10,000 draws of N(-3, 0.1): the sample mean is within 5 standard errors.
    assert abs(rho.mean() - (-3.0)) < 5 * 0.1 / np.sqrt(rho.size)
    assert abs(rho.std() - 0.1) < 5 * 0.1 / np.sqrt(2 * rho.size)
    sigma = np.log1p(np.exp(rho))
    assert sigma.max() < 0.07


@pytest.mark.jax
def test_sample_has_posterior_moments():
    layer = _built_layer(kl_weight=1.0, seed=1)
    post = layer.posterior
    prepared = post.prepare(layer.kernel_params)
    loc, scale = (np.asarray(t) for t in prepared)
    gen = keras.random.SeedGenerator(7)
    draws = np.stack([
        keras.ops.convert_to_numpy(
            post.sample(prepared, noise.next_seed(gen), "float32", keras.ops.ones(()))
        )
        for _ in range(400)
    ])
    z = (draws - loc) / scale  # standard normal draws if the sampler is right
    n = z.size
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1.0) < 5 * np.sqrt(2.0 / n)


@pytest.mark.jax
def test_zero_noise_scale_returns_the_mean():
    layer = _built_layer(kl_weight=1.0)
    w = layer.posterior.sample(layer.posterior.prepare(layer.kernel_params),
                               keras.ops.convert_to_tensor([0, 1], "int32"), "float32",
                               keras.ops.zeros(()))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(w), layer.kernel_params[0].numpy())


@pytest.mark.jax
def test_serialization_round_trip():
    post = posteriors.MeanFieldNormal(rho_init=-5.0, rho_init_stddev=0.0)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(post))
    assert restored == post


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: posteriors.MeanFieldNormal(rho_init=float("inf")), "rho_init"),
        (lambda: posteriors.MeanFieldNormal(rho_init_stddev=-0.1), "rho_init_stddev"),
        (lambda: posteriors.get("full_covariance"), "posterior"),
        (lambda: posteriors.get(1.5), "posterior"),
        (lambda: posteriors.MeanFieldNormal(untransformed_scale_initializer="nope"),
         "untransformed_scale_initializer"),
        (lambda: posteriors.MeanFieldNormal(untransformed_scale_regularizer=3),
         "untransformed_scale_regularizer"),
        (lambda: posteriors.MeanFieldNormal(untransformed_scale_constraint="nope"),
         "untransformed_scale_constraint"),
    ],
)
@pytest.mark.jax
def test_invalid_arguments_name_the_argument(make, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        make()


def _clipped_posterior(**kwargs):
    # TFP's CIFAR-10 examples' constraint, at a bound the initial rho (-1) is above.
    return posteriors.MeanFieldNormal(
        rho_init=-1.0, rho_init_stddev=0.0,
        untransformed_scale_constraint=posteriors.ClipValue(-1000.0, -2.0), **kwargs)


@pytest.mark.jax
def test_untransformed_scale_constraint_clips_rho_after_an_optimizer_step():
    model = keras.Sequential([keras.Input((4,)), DenseReparameterization(
        3, posterior=_clipped_posterior(), kl_weight=1e-3, seed=0)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit(np.ones((8, 4), "float32"), np.zeros((8, 3), "float32"), epochs=1, verbose=0)
    loc, rho = model.layers[0].kernel_params
    # One small step moves rho by ~0.01 from -1; the constraint puts it at -2.
    np.testing.assert_allclose(rho.numpy(), -2.0)
    assert np.all(np.abs(loc.numpy()) < 2.0) and not np.allclose(loc.numpy(), -2.0)


@pytest.mark.jax
def test_untransformed_scale_initializer_and_regularizer_act_on_rho():
    layer = DenseReparameterization(3, posterior=posteriors.MeanFieldNormal(
        untransformed_scale_initializer=keras.initializers.Constant(-5.0),
        untransformed_scale_regularizer=keras.regularizers.L2(0.1)), kl_weight=0.0)
    layer(np.ones((2, 4), "float32"))
    np.testing.assert_array_equal(layer.kernel_params[1].numpy(), -5.0)
    # The weight regularizer of rho: 0.1 * sum(rho^2) over the 4 x 3 kernel.
    np.testing.assert_allclose(sum(float(x) for x in layer.losses), 0.1 * 25.0 * 12, rtol=1e-6)


@pytest.mark.jax
def test_tfp_arguments_round_trip_through_a_layer_config():
    post = _clipped_posterior(
        untransformed_scale_initializer=keras.initializers.RandomNormal(-9.0, 0.1),
        untransformed_scale_regularizer=keras.regularizers.L2(0.5))
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(
        DenseReparameterization(3, posterior=post))).posterior
    assert restored == post and hash(restored) == hash(post)
    assert restored.untransformed_scale_constraint.max_value == -2.0
    assert restored.untransformed_scale_initializer.mean == -9.0
    # A config without them (saved before they existed) reads as before.
    assert "untransformed_scale_constraint" not in posteriors.MeanFieldNormal().get_config()


def _draw_paths(monkeypatch):
    """Which weight sizes `MeanFieldNormal.draw` hands to the compiled cluster."""
    fused_sizes = []
    cluster = posteriors.mean_field._fused_draw_terms()

    def recording(loc, *args):
        fused_sizes.append(int(np.prod(loc.shape)))
        return cluster(loc, *args)

    monkeypatch.setattr(posteriors.mean_field, "_fused_draw_terms", lambda: recording)
    return fused_sizes


@pytest.mark.parametrize("jit_compile", [False, True])
def test_only_weights_from_the_threshold_up_are_drawn_by_the_compiled_cluster(
        monkeypatch, jit_compile):
    fused_sizes = _draw_paths(monkeypatch)
    size = posteriors.mean_field.FUSE_MIN_SIZE
    # Input width 1: kernel (1, units) and bias (units,) have `units` weights each.
    below = DenseReparameterization(size - 1, bayesian_bias=True, seed=0)
    at = DenseReparameterization(size, bayesian_bias=True, seed=0)
    below.build((None, 1))
    at.build((None, 1))
    x = np.ones((2, 1), "float32")
    tf.function(lambda: (below(x), at(x)), jit_compile=jit_compile)()
    # Inside an XLA computation the plain ops fuse with the model: no cluster.
    assert fused_sizes == ([] if jit_compile else [size, size])


def test_both_draw_paths_give_the_same_scale_and_kl_and_standard_normal_noise():
    size = posteriors.mean_field.FUSE_MIN_SIZE
    post = posteriors.MeanFieldNormal(rho_init=-2.0, rho_init_stddev=0.5)
    prior = priors.NormalPrior()
    rng = np.random.default_rng(0)
    loc = rng.normal(size=(size,)).astype("float32")
    rho = rng.normal(-2.0, 0.5, size=(size,)).astype("float32")
    seed = tf.constant([3, 4], tf.int32)
    # The same values drawn once below the threshold (plain ops) and once at it.
    small = post.draw((loc[:size - 1], rho[:size - 1]), seed, "float32", prior=prior)
    large = post.draw((loc, rho), seed, "float32", prior=prior)
    np.testing.assert_allclose(small.prepared[1], large.prepared[1][:size - 1], rtol=1e-6)
    # The KL is a sum over weights: the large one has one more term.
    last = float(prior.kl_from_normal(loc[size - 1:], large.prepared[1][size - 1:]))
    assert float(small.kl) + last == pytest.approx(float(large.kl), rel=1e-5)
    for draw in (small, large):
        z = np.asarray(draw.perturbation) / np.asarray(draw.prepared[1])
        # n standard normals: the mean within 5 standard errors, the variance too.
        n = z.size
        assert abs(z.mean()) < 5 / np.sqrt(n)
        assert abs(z.var() - 1.0) < 5 * np.sqrt(2.0 / n)

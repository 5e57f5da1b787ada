"""Checks and data shared by the tests of the distribution-valued output layers.

`check_same_distribution_as_tfp`: for the same parameters a layer's
distribution has the same log-density, mean and variance as
`tfp.layers.<Name>.new` (the tf_keras reference) and the same `params_size`.
"""

import keras
import numpy as np
import pytest

tf_keras = pytest.importorskip("tf_keras")  # first: TFP's layers are built on it

import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from tfp_bnn import _backend  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn.distributions import distribution_of  # noqa: E402

tfpl = tfp.layers


def _targets(family, distribution, rng):
    """Targets in the support of `family`, shaped like one sample."""
    shape = tuple(distribution.batch_shape) + tuple(distribution.event_shape)
    if family == "bernoulli":
        return rng.integers(0, 2, shape).astype("float32")
    if family == "poisson":
        return rng.integers(0, 6, shape).astype("float32")
    if family == "one_hot":
        return np.eye(shape[-1], dtype="float32")[rng.integers(0, shape[-1], shape[:-1])]
    return rng.normal(size=shape).astype("float32")


def check_same_distribution_as_tfp(name, args, family="real"):
    """`layers.<name>(*args)` against `tfp.layers.<name>.new(params, *args)`.

    `family` says which targets the distribution supports: "real", "bernoulli",
    "poisson" or "one_hot" (which has no mean: its value is the mode).
    """
    ours, theirs = getattr(layers, name), getattr(tfpl, name)
    size = ours.params_size(*args)
    assert size == theirs.params_size(*args)
    rng = np.random.default_rng(7)
    params = rng.normal(size=(6, size)).astype("float32")
    layer = ours(*args, convert_to_tensor_fn="mode" if family == "one_hot" else "mean")
    value = layer(params)
    mine = distribution_of(value)
    ref = theirs.new(tf.constant(params), *args)
    y = _targets(family, ref, rng)
    np.testing.assert_allclose(mine.log_prob(y), ref.log_prob(y), rtol=1e-5, atol=1e-5)
    # The tensor forwards the distribution's methods (TFP's rv_y.log_prob(y)).
    np.testing.assert_allclose(value.log_prob(y), ref.log_prob(y), rtol=1e-5, atol=1e-5)
    if family != "one_hot":
        np.testing.assert_allclose(mine.mean(), ref.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, ref.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine.variance(), ref.variance(), rtol=1e-4, atol=1e-6)
    assert tuple(value.shape) == (6,) + tuple(ref.event_shape) + tuple(ref.batch_shape[1:])


def regression_data(n=192, seed=0):
    """y = 2 x_0 - x_1 + 0.5 + N(0, 0.2^2) noise, x uniform in [-1, 1]^2."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2)).astype("float32")
    y = (x @ np.array([2.0, -1.0]) + 0.5 + 0.2 * rng.normal(size=n)).astype("float32")
    return x, y


def normal_model(head=None, seed=3):
    """Dense(2) into `head` (an IndependentNormal(1) by default), seeded."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(2),
                             head or layers.IndependentNormal(1, seed=seed)])


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def normal_head(t):
    """A registered `make_distribution_fn`: Normal(t_0, softplus(t_1))."""
    return tfp.distributions.Normal(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:]))


def _real(rng, n, d):
    return rng.normal(size=(n, d))


def _counts(rng, n, d):
    return rng.integers(0, 4, (n, d)).astype("float64")


def _bits(rng, n, d):
    return rng.integers(0, 2, (n, d)).astype("float64")


def _one_hot(rng, n, d):
    return np.eye(d)[rng.integers(0, d, n)]


def _labels(rng, n, d):
    return rng.integers(0, d, n).astype("float64")


# Every distribution layer: name -> (make(**layer kwargs), inputs' last axis,
# targets(rng, n), a value TFP passes as convert_to_tensor_fn that the layer has).
DISTRIBUTION_LAYERS = {
    "IndependentNormal": (lambda **kw: layers.IndependentNormal(2, **kw), 4,
                          lambda rng, n: _real(rng, n, 2), "mean"),
    "IndependentLogistic": (lambda **kw: layers.IndependentLogistic(2, **kw), 4,
                            lambda rng, n: _real(rng, n, 2), "mean"),
    "IndependentBernoulli": (lambda **kw: layers.IndependentBernoulli(2, **kw), 2,
                             lambda rng, n: _bits(rng, n, 2), "mean"),
    "IndependentPoisson": (lambda **kw: layers.IndependentPoisson(2, **kw), 2,
                           lambda rng, n: _counts(rng, n, 2), "mean"),
    "Categorical": (lambda **kw: layers.Categorical(3, **kw), 3,
                    lambda rng, n: _labels(rng, n, 3), "mode"),
    "OneHotCategorical": (lambda **kw: layers.OneHotCategorical(3, **kw), 3,
                          lambda rng, n: _one_hot(rng, n, 3), "mode"),
    "MultivariateNormalTriL": (lambda **kw: layers.MultivariateNormalTriL(2, **kw), 5,
                               lambda rng, n: _real(rng, n, 2), "mean"),
    "MixtureNormal": (lambda **kw: layers.MixtureNormal(3, 2, **kw), 15,
                      lambda rng, n: _real(rng, n, 2), "mean"),
    "MixtureLogistic": (lambda **kw: layers.MixtureLogistic(3, 2, **kw), 15,
                        lambda rng, n: _real(rng, n, 2), "mean"),
    "MixtureSameFamily": (
        lambda **kw: layers.MixtureSameFamily(2, layers.IndependentPoisson(2), **kw), 6,
        lambda rng, n: _counts(rng, n, 2), "mean"),
    "DistributionLambda": (lambda **kw: layers.DistributionLambda(normal_head, **kw), 2,
                           lambda rng, n: _real(rng, n, 1), "mean"),
    "VariationalGaussianProcess": (
        lambda **kw: layers.VariationalGaussianProcess(
            4, "exponentiated_quadratic", unconstrained_observation_noise_variance_initializer=0.0,
            **kw), 2, lambda rng, n: _real(rng, n, 1), "mean"),
}


def distribution_model(name, dtype=None, seed=0, **kwargs):
    """keras.Input((3,)) -> Dense -> the layer `name`, both in `dtype` (None: the policy's)."""
    make, width, _, _ = DISTRIBUTION_LAYERS[name]
    if dtype is not None:  # else the layer's own default (float32 under mixed precision)
        kwargs["dtype"] = dtype
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(width, dtype=dtype),
                             make(**kwargs)])


# -- checks that run on both backends (TFP's substrate for the active one) ----------------

def check_log_prob_by_hand(layer, args, params, reference, y):
    """`layer(params)`'s distribution against `reference`, the substrate's built by hand.

    `args` are `params_size`'s arguments; the layer's output must give
    `reference`'s log-density at `y`. On JAX both run in one `jax.jit`
    program, as in a compiled step (eager JAX runs a program per operation).
    """
    assert type(layer).params_size(*args) == params.shape[-1]

    def log_probs(params):
        distribution = distribution_of(layer(params))
        assert type(distribution) is type(reference)
        return distribution.log_prob(y), reference.log_prob(y)

    if _backend.is_jax():
        import jax  # noqa: PLC0415 - only on the JAX backend

        log_probs = jax.jit(log_probs)
    mine, expected = log_probs(params)
    np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5)


def fit_eagerly_and_reload(model, x, y, tmp_path):
    """Fits `model` (compiled with the NLL) 2 epochs of 2 batches, saves it and loads it
    with safe_mode=True; returns (the epochs' losses, model(x), the loaded model(x))."""
    history = model.fit(x, y, epochs=2, batch_size=len(x) // 2, shuffle=False, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    return history.history["loss"], model(x), loaded(x)

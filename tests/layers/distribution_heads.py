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

"""A TFP distribution with constant parameters through a JSON config and back."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.distributions.serialization import deserialize_distribution
from tfp_bnn.distributions.serialization import serialize_distribution

tfd = tfp.distributions
tfb = tfp.bijectors

# The priors TFP's examples and tutorials write.
DISTRIBUTIONS = {
    "Normal": lambda: tfd.Normal(0.0, 2.0),
    "Independent": lambda: tfd.Independent(tfd.Normal(loc=tf.zeros(2), scale=1),
                                           reinterpreted_batch_ndims=1),
    "MultivariateNormalDiag": lambda: tfd.MultivariateNormalDiag(loc=tf.zeros(3)),
    "MultivariateNormalTriL": lambda: tfd.MultivariateNormalTriL(
        loc=[1.0, -1.0], scale_tril=[[1.0, 0.0], [0.5, 2.0]]),
    "Sample": lambda: tfd.Sample(tfd.Laplace(0.0, 1.0), sample_shape=[2, 3]),
    "MixtureSameFamily": lambda: tfd.MixtureSameFamily(
        tfd.Categorical(probs=[0.3, 0.7]), tfd.Normal([0.0, 1.0], [1.0, 2.0])),
    "TransformedDistribution": lambda: tfd.TransformedDistribution(
        tfd.Normal(0.0, 1.0), tfb.Chain([tfb.Shift(1.0), tfb.Exp()])),
    "StudentT_float64": lambda: tfd.StudentT(np.float64(3.0), 0.0, 1.0),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_round_trip_through_json_gives_the_same_distribution(name):
    distribution = DISTRIBUTIONS[name]()
    config = json.loads(json.dumps(serialize_distribution(distribution)))
    rebuilt = deserialize_distribution(config)
    assert type(rebuilt) is type(distribution) and rebuilt.dtype == distribution.dtype
    assert rebuilt.batch_shape == distribution.batch_shape
    assert rebuilt.event_shape == distribution.event_shape
    z = distribution.sample(5, seed=(3, 4))
    np.testing.assert_allclose(rebuilt.log_prob(z), distribution.log_prob(z), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_rebuilt_in_another_float_dtype(name):
    distribution = DISTRIBUTIONS[name]()
    rebuilt = deserialize_distribution(serialize_distribution(distribution), dtype="float64")
    assert rebuilt.dtype == tf.float64
    z = tf.cast(distribution.sample(5, seed=(3, 4)), tf.float64)
    expected = distribution.log_prob(tf.cast(z, distribution.dtype))
    np.testing.assert_allclose(rebuilt.log_prob(z), expected, rtol=1e-5)


@pytest.mark.parametrize("make, reason", [
    (lambda: tfd.Normal(tf.Variable(0.0), 1.0), "variable"),
    (lambda: tfd.Normal(tfp.util.TransformedVariable(1.0, tfb.Exp()), 1.0), "variable"),
    (lambda: tfd.JointDistributionSequential([tfd.Normal(0.0, 1.0),
                                              lambda x: tfd.Normal(x, 1.0)]), "function"),
])
def test_what_a_config_cannot_hold_is_refused_naming_the_argument(make, reason):
    with pytest.raises(ValueError, match=f"`prior` must be .*{reason}") as error:
        serialize_distribution(make(), "prior")
    assert "\n" not in str(error.value)


def test_a_class_outside_tfp_is_refused():
    class MyNormal(tfd.Normal):
        pass

    with pytest.raises(ValueError, match="MyNormal is not a tfp.distributions class"):
        serialize_distribution(MyNormal(0.0, 1.0))
    with pytest.raises(ValueError, match="'print' is not a tfp.distributions class"):
        deserialize_distribution({"distribution": "print", "parameters": {}})

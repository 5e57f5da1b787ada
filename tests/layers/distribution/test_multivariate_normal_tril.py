"""MultivariateNormalTriL: a full-covariance Gaussian output layer: parity with tfp.layers."""

from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("MultivariateNormalTriL", (3,), "real")

"""MixtureLogistic: a mixture of logistic distributions as output; parity with tfp.layers."""

from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("MixtureLogistic", (2, 1), "real")

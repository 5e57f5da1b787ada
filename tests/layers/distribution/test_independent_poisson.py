"""IndependentPoisson: an output layer with independent Poisson counts: parity with tfp.layers."""

from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("IndependentPoisson", (3,), "poisson")

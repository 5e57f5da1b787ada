"""Every variational layer, in several configurations, passes the standard battery."""

import pytest

from tfp_bnn import priors
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.testing import run_bayesian_layer_test

DENSE = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]
CONV = [Conv2DReparameterization, Conv2DFlipout]


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"bayesian_bias": True, "activation": "relu"},
        {"prior": priors.ScaleMixturePrior(0.5, 1.0, 0.01), "kl_estimator": "mc"},
        {"use_bias": False, "kl_estimator": "mc"},
    ],
    ids=["default", "bayesian_bias", "mixture_prior_mc", "no_bias_mc"],
)
def test_dense_layers(cls, extra):
    run_bayesian_layer_test(cls, dict(units=3, kl_weight=0.01, **extra), (5, 4))


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
def test_dense_layers_on_rank3_inputs(cls):
    run_bayesian_layer_test(cls, dict(units=3, kl_weight=0.01), (4, 2, 5))


@pytest.mark.parametrize("cls", CONV, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "extra",
    [
        {"padding": "same"},
        {"strides": 2, "bayesian_bias": True},
        {"dilation_rate": 2, "prior": "scale_mixture"},
    ],
    ids=["same", "strided_bayesian_bias", "dilated_mixture"],
)
def test_conv_layers(cls, extra):
    run_bayesian_layer_test(cls, dict(filters=2, kernel_size=3, kl_weight=0.01, **extra),
                            (3, 7, 7, 2))


@pytest.mark.parametrize("cls", CONV, ids=lambda c: c.__name__)
def test_grouped_conv(cls):
    run_bayesian_layer_test(cls, dict(filters=4, kernel_size=3, groups=2, kl_weight=0.01),
                            (3, 6, 6, 4))

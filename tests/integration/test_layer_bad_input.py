"""Invalid constructor arguments and inputs give errors that say what was wrong."""

import numpy as np
import pytest

from tfp_bnn import priors
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

DENSE = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]
CONV = [Conv2DReparameterization, Conv2DFlipout]


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"units": 0}, r"`units`.*got 0"),
        ({"units": -3}, r"`units`.*got -3"),
        ({"units": 2.5}, r"`units`.*got 2.5"),
        ({"units": 2, "kl_weight": -0.1}, r"`kl_weight`.*got -0.1"),
        ({"units": 2, "kl_weight": float("nan")}, r"`kl_weight`.*nan"),
        ({"units": 2, "posterior": "gaussian_process"}, r"`posterior` 'gaussian_process'"),
        ({"units": 2, "prior": "cauchy"}, r"`prior` 'cauchy'"),
        ({"units": 2, "kl_estimator": "exact"}, r"`kl_estimator`.*'exact'"),
        ({"units": 2, "prior": "scale_mixture", "kl_estimator": "analytic"},
         r"closed-form KL"),
        ({"units": 2, "seed": -1}, r"`seed`.*-1"),
        ({"units": 2, "seed": "abc"}, r"`seed`.*'abc'"),
    ],
)
def test_dense_constructor_errors(cls, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        cls(**kwargs)


@pytest.mark.parametrize("cls", CONV, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"filters": 0, "kernel_size": 3}, r"`filters`.*got 0"),
        ({"filters": 2, "kernel_size": 0}, r"`kernel_size`"),
        ({"filters": 2, "kernel_size": (3, 3, 3)}, r"`kernel_size`"),
        ({"filters": 2, "kernel_size": 3, "strides": -1}, r"`strides`"),
        ({"filters": 2, "kernel_size": 3, "padding": "causal"}, r"`padding`.*'causal'"),
        ({"filters": 2, "kernel_size": 3, "data_format": "NHWC"}, r"`data_format`.*'NHWC'"),
        ({"filters": 3, "kernel_size": 3, "groups": 2}, r"`filters` \(3\).*`groups` \(2\)"),
        ({"filters": 2, "kernel_size": 3, "strides": 2, "dilation_rate": 2}, r"`strides`"),
        ({"filters": 2, "kernel_size": 3, "prior": priors.NormalPrior(scale=1.0),
          "kl_weight": -1.0}, r"`kl_weight`"),
    ],
)
def test_conv_constructor_errors(cls, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        cls(**kwargs)


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
def test_dense_wrong_last_dimension_says_what_was_expected(cls):
    layer = cls(2, kl_weight=0.1)
    layer(np.ones((3, 4), "float32"))
    with pytest.raises(ValueError, match=r"expected axis -1 of input shape to have value 4"):
        layer(np.ones((3, 5), "float32"))


@pytest.mark.parametrize("cls", DENSE, ids=lambda c: c.__name__)
def test_dense_rank_one_input_is_rejected(cls):
    with pytest.raises(ValueError, match=r"expected min_ndim=2, found ndim=1"):
        cls(2, kl_weight=0.1)(np.ones((4,), "float32"))


@pytest.mark.parametrize("cls", CONV, ids=lambda c: c.__name__)
def test_conv_wrong_rank_and_channels(cls):
    layer = cls(2, 3, kl_weight=0.1)
    with pytest.raises(ValueError, match=r"expected ndim=4, found ndim=3"):
        layer(np.ones((2, 8, 8), "float32"))
    layer(np.ones((2, 8, 8, 3), "float32"))
    with pytest.raises(ValueError, match=r"expected axis -1 of input shape to have value 3"):
        layer(np.ones((2, 8, 8, 5), "float32"))

"""The standard battery settings shared by the Dense and Conv2D variational layers.

Each layer's own test file runs `tfp_bnn.testing.run_bayesian_layer_test`
(config round trip, symbolic and eager calls, KL gradient, seeds, one fit
step, a .keras file under safe_mode) over the settings below; the three Dense
estimators and the two Conv2D estimators take the same settings.
"""

import pytest

from tfp_bnn import priors
from tfp_bnn.testing import run_bayesian_layer_test

DENSE_SETTINGS = [
    pytest.param({}, id="default"),
    pytest.param({"bayesian_bias": True, "activation": "relu"}, id="bayesian_bias"),
    pytest.param({"prior": priors.ScaleMixturePrior(0.5, 1.0, 0.01), "kl_estimator": "mc"},
                 id="mixture_prior_mc"),
    pytest.param({"use_bias": False, "kl_estimator": "mc"}, id="no_bias_mc"),
]

CONV2D_SETTINGS = [
    pytest.param({"padding": "same"}, id="same"),
    pytest.param({"strides": 2, "bayesian_bias": True}, id="strided_bayesian_bias"),
    pytest.param({"dilation_rate": 2, "prior": "scale_mixture"}, id="dilated_mixture"),
    pytest.param({"filters": 4, "groups": 2}, id="grouped"),
]


def check_dense(cls, extra, input_shape=(5, 4)):
    """The battery for a Dense estimator `cls` with `units=3` plus `extra`."""
    run_bayesian_layer_test(cls, dict(units=3, kl_weight=0.01, **extra), input_shape)


def check_conv2d(cls, extra):
    """The battery for a Conv2D estimator `cls`, 3x3 kernels, plus `extra`.

    A grouped setting (`groups` in `extra`) takes 4 input channels, the others 2.
    """
    kwargs = dict(filters=2, kernel_size=3, kl_weight=0.01)
    kwargs.update(extra)
    shape = (3, 6, 6, 4) if "groups" in extra else (3, 7, 7, 2)
    run_bayesian_layer_test(cls, kwargs, shape)

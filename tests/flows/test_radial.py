"""The radial bijector: its parameterization keeps beta >= -alpha (the shared bijector
contract is in tests/integration/test_bijector_contract.py).
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.flows.bijector_cases import D
from tfp_bnn.flows import Radial


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_radial_parameterization_keeps_it_invertible(scale):
    rng = np.random.default_rng(8)
    raw = scale * rng.normal(size=(200, 2))
    bijector = Radial(tf.zeros(D, tf.float64), raw[:, 0], raw[:, 1])
    alpha, beta = bijector.alpha.numpy(), bijector.beta.numpy()
    assert np.all(alpha > 0.0)
    assert np.all(beta >= -alpha)

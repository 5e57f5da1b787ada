"""The Moments representation."""

import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn.moments
from tfp_bnn.moments import Moments


def test_public_names_are_sorted_and_importable():
    assert tfp_bnn.moments.__all__ == sorted(tfp_bnn.moments.__all__)
    for name in tfp_bnn.moments.__all__:
        assert hasattr(tfp_bnn.moments, name)


def test_mode_is_validated():
    with pytest.raises(ValueError, match="`mode` must be one of"):
        Moments(tf.ones([1, 2]), None, "Full")
    with pytest.raises(ValueError, match="`mode` must be one of"):
        Moments.deterministic(tf.ones([1, 2]), mode="diag")


def test_views_of_both_modes():
    mean = tf.constant(np.arange(6.0).reshape(1, 2, 3), tf.float32)
    var = mean + 1.0
    diag = Moments(mean, var, "diagonal")
    full = diag.as_mode("full")
    assert isinstance(full, tuple) and full._fields == ("mean", "cov", "mode")
    assert full.cov.shape == (1, 6, 6) and full.event_size == 6
    np.testing.assert_array_equal(full.cov[0], np.diag(np.arange(1.0, 7.0)))
    np.testing.assert_array_equal(full.variance(), var)
    np.testing.assert_array_equal(full.as_mode("diagonal").cov, var)
    constant = Moments.deterministic(mean, "full")
    assert constant.is_deterministic and not diag.is_deterministic
    np.testing.assert_array_equal(constant.variance(), np.zeros([1, 2, 3]))
    np.testing.assert_array_equal(constant.full_covariance(), np.zeros([1, 6, 6]))
    scaled = full.scale(2.0)
    np.testing.assert_array_equal(scaled.cov, 4.0 * full.cov)


def test_moments_pass_into_compiled_functions():
    """Moments go in; tensors come out (a str field cannot leave XLA)."""
    x = Moments(tf.ones([2, 3]), tf.ones([2, 3]), "diagonal")

    @tf.function(jit_compile=True)
    def run(x):
        return x.scale(3.0).mean, x.scale(3.0).cov

    mean, var = run(x)
    np.testing.assert_array_equal(var, np.full([2, 3], 9.0))

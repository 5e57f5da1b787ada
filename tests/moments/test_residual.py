"""add: exact for independent summands."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import add


def test_means_and_covariances_add():
    rng = np.random.default_rng(0)
    mx, my = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    vx = rng.uniform(size=(2, 3, 4))
    x = Moments(tf.constant(mx, tf.float32), tf.constant(vx, tf.float32), "diagonal")
    y = Moments.deterministic(my)
    out = add(x, y)
    np.testing.assert_allclose(out.mean, mx + my, rtol=1e-6)
    np.testing.assert_array_equal(out.cov, x.cov)
    both = add(x.as_mode("full"), x.as_mode("full"))
    np.testing.assert_allclose(both.variance(), 2 * vx, rtol=1e-6)
    assert add(y, y).cov is None
    # A plain tensor is a constant in the other operand's mode.
    assert add(x.as_mode("full"), tf.constant(my, tf.float32)).mode == "full"


def test_mismatches_are_named():
    x = Moments.deterministic(tf.ones([2, 3]))
    with pytest.raises(ValueError, match="`x` has mode 'diagonal' but `y` has mode 'full'"):
        add(x, Moments.deterministic(tf.ones([2, 3]), "full"))
    with pytest.raises(ValueError, match="`x` of shape \\(2, 3\\) and `y` of shape \\(2, 4\\)"):
        add(x, Moments.deterministic(tf.ones([2, 4])))


def test_compiles_under_xla():
    x = Moments(tf.ones([2, 3, 4]), tf.eye(12, batch_shape=[2]), "full")

    @tf.function(jit_compile=True)
    def run(x):
        out = add(x, x)
        return out.mean, out.cov

    mean, cov = run(x)
    np.testing.assert_array_equal(cov, 2 * np.eye(12)[None].repeat(2, 0))

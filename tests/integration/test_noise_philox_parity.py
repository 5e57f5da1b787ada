"""Outside XLA, `tfp_bnn.noise` draws exactly TensorFlow's Philox numbers.

`noise.normal` and `noise.uniform` build their Philox draws from raw ops (one
key/counter op instead of `tf.random`'s ~45-op Python scramble) to keep the
traced graph of every variational layer small. The seeds of every layer, and
so every seeded run, rely on these being the very numbers
`tf.random.stateless_*(..., alg="philox")` gives.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import noise

# Negative and extreme int32 seeds too: the layers' split seeds take any int32 value.
SEEDS = [(0, 0), (1, 2), (-1, -2), (2**31 - 1, -(2**31)), (-7, 123456789)]
SHAPES = [(7,), (5, 5, 6, 16), (32, 1, 1, 6)]


def _seed(pair):
    return tf.constant(pair, tf.int32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_normal_is_tensorflow_philox_normal(dtype):
    for pair in SEEDS:
        for shape in SHAPES:
            expected = tf.random.stateless_normal(shape, _seed(pair), dtype=dtype, alg="philox")
            drawn = noise.normal(shape, dtype, _seed(pair))
            assert drawn.dtype == expected.dtype
            assert drawn.numpy().tobytes() == expected.numpy().tobytes(), (pair, shape)


def test_uniform_and_signs_are_tensorflow_philox_in_a_traced_graph():
    @tf.function
    def both(seed):
        expected = tf.random.stateless_uniform((32, 84), seed, alg="philox")
        return expected, noise.uniform(tf.constant([32, 84]), seed), noise.signs((32, 84),
                                                                                 "float32", seed)

    for pair in SEEDS:
        expected, drawn, signs = (t.numpy() for t in both(_seed(pair)))
        assert drawn.tobytes() == expected.tobytes(), pair
        np.testing.assert_array_equal(signs, np.where(expected < 0.5, -1.0, 1.0))

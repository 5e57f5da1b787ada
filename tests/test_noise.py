"""tfp_bnn.noise: Flipout's random signs on both backends.

The layers' normal draws are checked through every layer's seeded and XLA
tests; the signs get their own checks because on JAX they come 32 to a
random word (one bit each), which a mistake in the unpacking could bias or
correlate without any layer test noticing.
"""

import numpy as np
import pytest

from tfp_bnn import noise

pytestmark = pytest.mark.jax

SEED = np.array([3, 11], dtype="int32")


def _signs(shape, seed=SEED):
    return np.asarray(noise.signs(shape, "float32", seed))


def test_signs_are_plus_or_minus_one_in_the_shape_asked_for():
    # 7 * 13 = 91 entries: not a multiple of the 32 signs one word gives.
    values = _signs((7, 13))
    assert values.shape == (7, 13)
    assert set(np.unique(values)) <= {-1.0, 1.0}
    assert len(np.unique(values)) == 2


def test_signs_are_fair_at_every_bit_position_and_uncorrelated():
    # 4,096 words' worth: each of the 32 positions within a word has 4,096
    # draws, so a fair sign's mean there has s.e. 1/64; 4 s.e. is the bound.
    count = 32 * 4096
    values = _signs((count,))
    assert abs(values.mean()) < 4 / np.sqrt(count)
    by_position = values.reshape(4096, 32).mean(axis=0)
    assert np.all(np.abs(by_position) < 4 / np.sqrt(4096)), by_position
    # Neighbours (same word and across words) are uncorrelated: s.e. 1/sqrt(n).
    for lag in (1, 31, 32, 33):
        correlation = np.mean(values[:-lag] * values[lag:])
        assert abs(correlation) < 4 / np.sqrt(count - lag), (lag, correlation)


def test_the_same_seed_gives_the_same_signs_and_another_seed_others():
    first, again = _signs((64, 40)), _signs((64, 40))
    other = _signs((64, 40), np.array([3, 12], dtype="int32"))
    np.testing.assert_array_equal(first, again)
    # Two independent fair sign arrays of 2,560 entries agree on about half.
    agreement = np.mean(first == other)
    assert abs(agreement - 0.5) < 4 * 0.5 / np.sqrt(first.size)


def test_the_philox_id_is_tensorflows():
    import tensorflow as tf  # noqa: PLC0415 - a TensorFlow constant, on either backend

    assert noise._PHILOX == tf.random.Algorithm.PHILOX.value

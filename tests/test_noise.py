"""tfp_bnn.noise: the random numbers of the layers, on both backends.

The layers' draws are checked through every layer's seeded and XLA tests;
the draws get their own checks here because on JAX they are made from raw
random words (normals and uniforms from the top 23 bits, Flipout's signs 32
to a word), which a mistake in the unpacking could bias or correlate without
any layer test noticing.
"""

import keras
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


def test_normals_have_the_standard_normal_distribution():
    # 2^17 draws: the fraction below each quantile z is binomial with s.e.
    # sqrt(p (1 - p) / n); 4 s.e. is the bound, down to the 3-sigma tail.
    count = 2**17
    values = np.asarray(noise.normal((count,), "float32", SEED), dtype="float64")
    assert np.all(np.isfinite(values))
    assert abs(values.mean()) < 4 / np.sqrt(count)
    assert abs(values.var() - 1.0) < 4 * np.sqrt(2.0 / count)
    for z, p in ((-3.0, 0.0013499), (-2.0, 0.0227501), (-1.0, 0.1586553), (0.0, 0.5),
                 (1.0, 0.8413447), (2.0, 0.9772499), (3.0, 0.9986501)):
        fraction = np.mean(values < z)
        assert abs(fraction - p) < 4 * np.sqrt(p * (1 - p) / count), (z, fraction)


def test_uniforms_lie_in_the_unit_interval_and_fill_it_evenly():
    count = 2**16
    values = np.asarray(noise.uniform((count,), SEED), dtype="float64")
    assert values.min() >= 0.0 and values.max() < 1.0
    # Each tenth of [0, 1) holds a binomial(n, 0.1) count: s.e. sqrt(0.09 n).
    counts, _ = np.histogram(values, bins=10, range=(0.0, 1.0))
    assert np.all(np.abs(counts - count / 10) < 4 * np.sqrt(0.09 * count)), counts


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="jax.vmap: the JAX backend")
def test_each_key_of_a_vmapped_draw_gets_the_numbers_it_gets_alone():
    # XLA's generator has no batched form; JAX's default rule for it would draw
    # the whole batch from the first key (tfp_bnn.predict vmaps over samples).
    import jax  # noqa: PLC0415 - the JAX backend

    keys = np.array([[3, 11], [3, 12], [7, 0]], dtype="uint32")
    words = jax.jit(jax.vmap(noise._jax_bits((5, 4))))(keys)
    for key, batch_words in zip(keys, np.asarray(words)):
        np.testing.assert_array_equal(batch_words, np.asarray(noise._jax_bits((5, 4))(key)))
    # The normals made from them: equal up to how XLA fused erfinv in each program.
    batched = jax.jit(jax.vmap(lambda key: noise.normal((5, 4), "float32", key)))(keys)
    for key, values in zip(keys, np.asarray(batched)):
        np.testing.assert_allclose(values, np.asarray(noise.normal((5, 4), "float32", key)),
                                   rtol=1e-6, atol=1e-6)
    signs = jax.vmap(lambda key: noise.signs((40,), "float32", key))(keys)
    np.testing.assert_array_equal(np.asarray(signs)[2], _signs((40,), keys[2]))

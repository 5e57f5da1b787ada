"""Random draws for the variational layers.

Seeds come from the layer's `keras.random.SeedGenerator` (so `seed=` makes a
run reproducible and the state is saved with the layer), but the draws name
TensorFlow's Philox algorithm explicitly: `keras.random` leaves the choice
to TensorFlow, whose default is 40-80x slower under XLA on CPU
(benchmarks/train_step.py measured a 784-400-400-10 Flipout step at 210 ms
with it against ~25 ms with Philox). Philox runs with and without XLA on
every device.
"""

import tensorflow as tf

_ALGORITHM = "philox"


def next_seed(seed_generator):
    """Next int32 seed pair from `seed_generator` (advancing its state)."""
    seed = seed_generator.next()
    return tf.cast(tf.math.floormod(seed, 2**31 - 1), tf.int32)


def call_seeds(seed_generator, count):
    """`count` independent seed pairs from one advance of `seed_generator`.

    A layer advances its generator once per call and splits the result for
    its draws: every advance is a read-modify-write of a variable that
    orders the graph, and three of them cost a Flipout layer more than its
    random numbers did (~0.5 ms per call on 2 CPU cores).
    """
    return tf.unstack(tf.random.experimental.stateless_split(next_seed(seed_generator), count))


def normal(shape, dtype, seed):
    """Standard normal draws of `shape` in `dtype` from an int32 seed pair."""
    return tf.random.stateless_normal(shape, seed=seed, dtype=dtype, alg=_ALGORITHM)


def signs(shape, dtype, seed):
    """Random signs +-1 of `shape` (Flipout's sign vectors)."""
    u = tf.random.stateless_uniform(shape, seed=seed, alg=_ALGORITHM)
    return tf.cast(tf.where(u < 0.5, -1.0, 1.0), dtype)

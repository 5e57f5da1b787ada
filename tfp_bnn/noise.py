"""Random draws for the variational layers.

Seeds come from the layer's `keras.random.SeedGenerator` (so `seed=` makes a
run reproducible; its state is a variable of the model, which weights files
leave out and `tfp_bnn.callbacks.AtomicBackupAndRestore` checkpoints), but
the draws name their algorithm, chosen for where the graph runs:

- outside XLA, TensorFlow's Philox kernels, which are multi-threaded
  (313,600 normals in ~0.2 ms on 2 cores);
- inside an XLA computation (`jit_compile=True`), ThreeFry uniforms, with
  normals through the inverse CDF eps = sqrt(2) erfinv(u), u ~ U(-1, 1).
  XLA on CPU runs Philox normals 20-50x slower and TensorFlow's default
  algorithm (what `keras.random` uses) 40-80x slower: a Flipout MLP step
  measured 210 ms with the default against ~10.5 ms with this choice
  (benchmarks/train_step.py).

The inverse-CDF normals are exact up to float32 resolution (|eps| <= 5.4).
The same seed therefore gives the same numbers within one compilation mode,
not across modes.
"""

import math

import numpy as np
import tensorflow as tf

# Largest float32 below 1: keeps erfinv finite at the ends of (-1, 1).
_U_MAX = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
# TensorFlow's id of the Philox algorithm, as the raw ops take it.
_PHILOX = tf.random.Algorithm.PHILOX.value


def in_xla_context():
    """True while tracing inside a function that XLA compiles."""
    try:
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415
    except ImportError:  # pragma: no cover - private module moved
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


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


def _philox_key_counter(seed):
    """Philox's key and counter for an int32 seed pair, as one graph op.

    The same numbers as `tf.random.stateless_*(..., alg="philox")`, whose
    Python derives them with ~45 small graph ops per draw (a traced Dense
    Flipout layer: 174 ops with those, 80 without). Outside XLA only (CPU and
    GPU kernels, where the device's algorithm is Philox).
    """
    return tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)


def normal(shape, dtype, seed):
    """Standard normal draws of `shape` in `dtype` from an int32 seed pair."""
    if in_xla_context():
        u = tf.random.stateless_uniform(shape, seed=seed, minval=-1.0, maxval=1.0,
                                        alg="threefry")
        eps = math.sqrt(2.0) * tf.math.erfinv(tf.clip_by_value(u, -_U_MAX, _U_MAX))
        return tf.cast(eps, dtype)
    key, counter = _philox_key_counter(seed)
    return tf.raw_ops.StatelessRandomNormalV2(shape=shape, key=key, counter=counter,
                                              alg=_PHILOX, dtype=tf.as_dtype(dtype))


def uniform(shape, seed):
    """float32 draws from U[0, 1) of `shape` from an int32 seed pair."""
    if in_xla_context():
        return tf.random.stateless_uniform(shape, seed=seed, alg="threefry")
    key, counter = _philox_key_counter(seed)
    return tf.raw_ops.StatelessRandomUniformV2(shape=shape, key=key, counter=counter,
                                               alg=_PHILOX, dtype=tf.float32)


def signs(shape, dtype, seed):
    """Random signs +-1 of `shape` (Flipout's sign vectors)."""
    return tf.cast(tf.where(uniform(shape, seed) < 0.5, -1.0, 1.0), dtype)

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

On the JAX backend a seed is a JAX PRNG key (uint32 pair) split from one
advance of the generator (`jax.random.split`), and the draws take their bits
from XLA's own ThreeFry generator (`jax.lax.rng_bit_generator` with the
ThreeFry algorithm, keyed by the key at counter 0): on the CPU it makes
313,600 32-bit words in ~0.7 ms where `jax.random.bits` (ThreeFry written
in JAX's ops, what `keras.random` uses) takes ~5 ms, and the random numbers
were most of a Flipout step on JAX (benchmarks/train_step.py). Normals are
sqrt(2) erfinv(u) of uniforms u in (-1, 1), as `jax.random.normal` makes
them. Under `jax.vmap` (the Monte Carlo samples of `tfp_bnn.predict`) each
key still draws its own numbers, the same as unbatched: XLA's generator
has no batched form, so the batch of keys is a loop (`_jax_bits`).
"""

import functools
import math

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _backend

# Largest float32 below 1: keeps erfinv finite at the ends of (-1, 1).
_U_MAX = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
# Smallest float32 above -1: the low end of the JAX uniforms that become normals.
_U_MIN = float(np.nextafter(np.float32(-1.0), np.float32(0.0)))
# TensorFlow's id of the Philox algorithm, as the raw ops take it
# (`tf.random.Algorithm.PHILOX.value`, checked by tests/test_noise.py; a
# literal so that importing this module does not load TensorFlow).
_PHILOX = 1


def in_xla_context():
    """True while tracing inside a function that XLA compiles.

    Always True on JAX, which compiles every computation with XLA (and has
    no graphs outside it to fuse clusters for).
    """
    if _backend.is_jax():
        return True
    try:
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415
    except ImportError:  # pragma: no cover - private module moved
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


def next_seed(seed_generator):
    """Next int32 seed pair from `seed_generator` (advancing its state).

    On JAX, the next PRNG key (uint32 pair) of the generator.
    """
    seed = seed_generator.next()
    if _backend.is_jax():
        return _jax_key(seed)
    return tf.cast(tf.math.floormod(seed, 2**31 - 1), tf.int32)


def call_seeds(seed_generator, count):
    """`count` independent seed pairs from one advance of `seed_generator`.

    A layer advances its generator once per call and splits the result for
    its draws: every advance is a read-modify-write of a variable that
    orders the graph, and three of them cost a Flipout layer more than its
    random numbers did (~0.5 ms per call on 2 CPU cores).
    """
    return split(next_seed(seed_generator), count)


def split(seed, count):
    """`count` independent seed pairs derived from the seed pair `seed`, as a list."""
    if _backend.is_jax():
        import jax  # noqa: PLC0415 - the JAX backend imported it already

        return list(jax.random.split(_jax_key(seed), count))
    return tf.unstack(tf.random.experimental.stateless_split(seed, count))


def zero_seed():
    """A constant seed pair, for calls that draw no noise."""
    if _backend.is_jax():
        return keras.ops.zeros([2], "uint32")
    return tf.zeros([2], tf.int32)


def seed_pair(first, second):
    """The constant seed pair (first, second) of TFP's stateless sampling (`sample(seed=)`):
    int32 on TensorFlow, a JAX PRNG key (uint32 pair) on JAX."""
    if _backend.is_jax():
        return _jax_key(np.array([first, second], np.uint32))
    return tf.constant([first, second], tf.int32)


def _jax_key(seed):
    """A raw JAX PRNG key (uint32 pair) from Keras' seed state (or any int pair)."""
    return keras.ops.cast(seed, "uint32")


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
    if _backend.is_jax():
        return _jax_normal(tuple(shape), dtype, seed)
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
    if _backend.is_jax():
        return _unit_floats(_jax_bits(tuple(shape))(_jax_key(seed)))
    if in_xla_context():
        return tf.random.stateless_uniform(shape, seed=seed, alg="threefry")
    key, counter = _philox_key_counter(seed)
    return tf.raw_ops.StatelessRandomUniformV2(shape=shape, key=key, counter=counter,
                                               alg=_PHILOX, dtype=tf.float32)


def signs(shape, dtype, seed):
    """Random signs +-1 of `shape` (Flipout's sign vectors)."""
    if _backend.is_jax():
        return _jax_signs(tuple(shape), dtype, seed)
    return tf.cast(tf.where(uniform(shape, seed) < 0.5, -1.0, 1.0), dtype)


def _jax_signs(shape, dtype, seed):
    """Signs from the bits of uint32 draws, 32 per word.

    Each bit of a random word is a fair coin independent of the others, so
    this is the same distribution as one uniform per sign with a 32nd of
    the generator's work.
    """
    ops = keras.ops
    count = math.prod(shape)
    words = _jax_bits(((count + 31) // 32,))(_jax_key(seed))
    bits = ops.bitwise_and(ops.right_shift(words[:, None], ops.arange(32, dtype="uint32")), 1)
    flat = ops.reshape(bits, (-1,))[:count]
    return ops.reshape(ops.cast(flat, dtype) * 2 - 1, shape)


def _unit_floats(words):
    """float32 in [0, 1) from uint32 words: their top 23 bits as a mantissa in [1, 2), less 1."""
    import jax  # noqa: PLC0415 - the JAX backend imported it already

    ops = keras.ops
    mantissa = ops.bitwise_or(ops.right_shift(words, 9), np.uint32(0x3F800000))
    return jax.lax.bitcast_convert_type(mantissa, "float32") - 1.0


def _jax_normal(shape, dtype, seed):
    """Standard normals sqrt(2) erfinv(u), u uniform in (-1, 1), computed in float32."""
    import jax  # noqa: PLC0415 - the JAX backend imported it already

    ops = keras.ops
    floats = _unit_floats(_jax_bits(shape)(_jax_key(seed)))
    u = ops.maximum(_U_MIN, floats * (1.0 - _U_MIN) + _U_MIN)  # [0, 1) onto (-1, 1)
    return ops.cast(math.sqrt(2.0) * jax.lax.erf_inv(u), dtype)


@functools.cache
def _jax_bits(shape):
    """The function key -> uint32 words of `shape` from XLA's ThreeFry generator.

    `jax.lax.rng_bit_generator` keyed by the PRNG key, its counter at 0. Its
    batching rule in JAX draws a whole batch from the first key, so the
    function has its own (`jax.custom_batching.custom_vmap`): each key of a
    batch is drawn as alone, in a loop, and sample t of a vectorized
    prediction gets the numbers it gets unbatched.
    """
    import jax  # noqa: PLC0415 - the JAX backend imported it already

    ops = keras.ops

    @jax.custom_batching.custom_vmap
    def draw(key):
        state = ops.concatenate([ops.cast(key, "uint32"), ops.zeros([2], "uint32")])
        _, words = jax.lax.rng_bit_generator(state, shape, dtype="uint32",
                                             algorithm=jax.lax.RandomAlgorithm.RNG_THREE_FRY)
        return words

    @draw.def_vmap
    def draw_batched(axis_size, in_batched, keys):
        del axis_size
        if not in_batched[0]:
            return draw(keys), False
        return jax.lax.map(draw, keys), True

    return draw


def shape_of(x):
    """The shape of `x` to draw noise of: `tf.shape` on TensorFlow (dynamic
    dimensions as the one Shape op the raw draws take), the static tuple on JAX."""
    if _backend.is_jax():
        return tuple(x.shape)
    return tf.shape(x)

"""Hand-written JAX training steps of the 784-400-400-10 MLP: what XLA allows.

train_step.py's JAX table times Keras models; this module writes the same
steps in plain JAX (no Keras, no tfp_bnn) to show how much of the Flipout /
Dense ratio is the backend's own and how much is ours:

- `dense`: relu MLP, softmax cross-entropy, Adam (lr 1e-3), batch 128;
- `flipout`: the same with Flipout layers (Wen et al. 2018): w = loc +
  softplus(rho) * eps, eps ~ N(0, 1) per weight, random signs per input and
  output entry, the closed-form KL to N(0, 1) weighted 1/N, Adam on loc,
  rho and bias. `random` says where eps and the signs come from: "jax"
  (`jax.random`, ThreeFry written in JAX's ops, one word per sign), "xla"
  (XLA's ThreeFry generator, `jax.lax.rng_bit_generator`, as `tfp_bnn.noise`
  draws on JAX), or "none": eps = 0 and signs = 1, made from the step's key
  so that XLA cannot fold them away, every other operation kept (the step's
  cost without random numbers).

Each step is one jitted function. No TensorFlow here.
"""

import functools
import math

import numpy as np

SIZES = (784, 400, 400, 10)
NUM_EXAMPLES = 60000
_U_MIN = float(np.nextafter(np.float32(-1.0), np.float32(0.0)))


def _zero(key):
    """0.0 computed from the key at run time (XLA cannot fold x * 0.0 away)."""
    import jax.numpy as jnp  # noqa: PLC0415

    return key[0].astype(jnp.float32) * 0.0


def _words(key, shape, random):
    import jax  # noqa: PLC0415 - only on the JAX backend
    import jax.numpy as jnp  # noqa: PLC0415

    if random == "jax":
        return jax.random.bits(key, shape, jnp.uint32)
    state = jnp.concatenate([key.astype(jnp.uint32), jnp.zeros(2, jnp.uint32)])
    _, words = jax.lax.rng_bit_generator(state, shape, dtype=jnp.uint32,
                                         algorithm=jax.lax.RandomAlgorithm.RNG_THREE_FRY)
    return words


def _normals(key, shape, random):
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    if random == "none":
        return jnp.full(shape, _zero(key))
    if random == "jax":
        return jax.random.normal(key, shape)
    floats = jax.lax.bitcast_convert_type((_words(key, shape, random) >> 9)
                                          | np.uint32(0x3F800000), jnp.float32) - 1.0
    return math.sqrt(2.0) * jax.lax.erf_inv(jnp.maximum(_U_MIN, floats * (1 - _U_MIN) + _U_MIN))


def _signs(key, shape, random):
    import jax.numpy as jnp  # noqa: PLC0415

    if random == "none":
        return jnp.full(shape, 1.0 + _zero(key))
    return jnp.where(_words(key, shape, random) & 1, 1.0, -1.0)


def _loss(params, x, y, key, flipout, random):
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    h, kl = x, 0.0
    for index, layer in enumerate(params):
        out = h @ layer["loc"] + layer["bias"]
        if flipout:
            key, k_eps, k_in, k_out = jax.random.split(key, 4)
            scale = jax.nn.softplus(layer["rho"])
            delta = scale * _normals(k_eps, layer["loc"].shape, random)
            out = out + ((h * _signs(k_in, h.shape, random)) @ delta) * _signs(k_out, out.shape, random)
            kl = kl + 0.5 * jnp.sum(scale**2 + layer["loc"]**2 - 1.0) - jnp.sum(jnp.log(scale))
        h = jax.nn.relu(out) if index < len(params) - 1 else out
    nll = jnp.mean(jax.nn.logsumexp(h, -1) - jnp.take_along_axis(h, y[:, None], 1)[:, 0])
    return nll + kl / NUM_EXAMPLES


def step(flipout, random="xla", batch_size=128, seed=0):
    """A zero-argument function running one training step (waited for)."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        layer = {"loc": jnp.asarray(rng.uniform(-limit, limit, (fan_in, fan_out)), "float32"),
                 "bias": jnp.zeros(fan_out, "float32")}
        if flipout:
            layer["rho"] = jnp.full((fan_in, fan_out), -3.0, "float32")
        params.append(layer)
    moments = [jax.tree.map(jnp.zeros_like, params) for _ in range(2)]
    x = jnp.asarray(rng.random((batch_size, SIZES[0])), "float32")
    y = jnp.asarray(rng.integers(0, SIZES[-1], batch_size), "int32")

    # As a training loop does: the loss comes back (for the log) and the old
    # state's buffers are donated to the new (Keras' trainer does both).
    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def update(params, m, v, key):
        loss, grads = jax.value_and_grad(_loss)(params, x, y, key, flipout, random)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        params = jax.tree.map(lambda p, a, b: p - 1e-3 * a / (jnp.sqrt(b) + 1e-7), params, m, v)
        return params, m, v, loss

    state = {"params": params, "m": moments[0], "v": moments[1], "count": 0}

    def run():
        state["count"] += 1
        key = jnp.array([state["count"], 0], "uint32")
        state["params"], state["m"], state["v"], loss = update(state["params"], state["m"],
                                                               state["v"], key)
        return jax.block_until_ready((state["params"], loss))

    return run

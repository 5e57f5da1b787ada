"""Monte Carlo references for the `tfp_bnn.moments` tests.

- `random_block_params` makes a random mean-field parameter dict.
- `sample_params` draws S weight samples from the mean-field posteriors of
  a `transformer_block` parameter dict.
- `sampled_transformer_block` runs the block once per sample, vectorised
  over the samples (einsum, no Python loop), and returns every stage.
- `sample_moments` estimates means, variances or covariances from samples
  together with their standard errors, estimated from the same samples.
- `assert_within_se` compares an exact value with an estimate in units of
  its standard error.
"""

import math

import numpy as np
from tfp_bnn._tf import tf

_KEYS = ("query", "key", "value", "output", "norm1", "ffn1", "ffn2", "norm2")


def random_block_params(seed, width, num_heads, key_dim, ff_dim, value_dim=None, std=0.1):
    """A `transformer_block` parameter dict with random means and posterior std `std`.

    Kernel means ~ N(0, 1 / fan_in) (Glorot-like scale), bias means ~
    N(0, 0.1^2), gains 1 + N(0, 0.1^2); every weight has variance std^2.
    """
    rng = np.random.default_rng(seed)
    value_dim = value_dim or key_dim
    shapes = {"query": (width, num_heads * key_dim), "key": (width, num_heads * key_dim),
              "value": (width, num_heads * value_dim), "output": (num_heads * value_dim, width),
              "ffn1": (width, ff_dim), "ffn2": (ff_dim, width)}

    def f32(value):
        return tf.constant(value, tf.float32)

    params = {}
    for key in _KEYS:
        if key in shapes:
            fan_in, units = shapes[key]
            loc = rng.normal(size=(fan_in, units)) / math.sqrt(fan_in)
            bias = 0.1 * rng.normal(size=units)
        else:
            loc, bias = 1.0 + 0.1 * rng.normal(size=width), 0.1 * rng.normal(size=width)
        params[key] = (f32(loc), f32(np.full(loc.shape, std**2)), f32(bias),
                       f32(np.full(bias.shape, std**2)))
    return params


def _draw(loc, var, num_samples, seed):
    if loc is None:
        return None
    loc = tf.convert_to_tensor(loc, tf.float32)
    draws = tf.broadcast_to(loc, [num_samples] + loc.shape.as_list())
    if var is None:
        return draws
    noise = tf.random.stateless_normal(draws.shape, seed=seed)
    return draws + tf.sqrt(tf.convert_to_tensor(var, tf.float32)) * noise


def sample_params(params, num_samples, seed=0):
    """S samples of every weight: dict key -> (kernel [S, ...], bias [S, ...] or None)."""
    samples = {}
    for index, key in enumerate(_KEYS):
        kernel_loc, kernel_var, bias_loc, bias_var = params[key]
        samples[key] = (
            _draw(kernel_loc, kernel_var, num_samples, [seed, 2 * index]),
            _draw(bias_loc, bias_var, num_samples, [seed, 2 * index + 1]),
        )
    return samples


def _dense(x, kernel, bias):
    y = tf.einsum("sbji,sio->sbjo", x, kernel)
    return y if bias is None else y + bias[:, None, None, :]


def _layer_norm(x, gamma, beta, epsilon):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) / tf.sqrt(var + epsilon)
    if gamma is not None:
        y = y * gamma[:, None, None, :]
    return y if beta is None else y + beta[:, None, None, :]


def sampled_transformer_block(x, samples, num_heads, key_dim, value_dim=None,
                              attention_mask=None, epsilon=1e-3):
    """The post-norm block of `tfp_bnn.moments.transformer_block`, per weight sample.

    Args:
        x: input [B, J, I] (shared by all samples) or [S, B, J, I].
        samples: output of `sample_params`.
        num_heads, key_dim, value_dim, attention_mask, epsilon: as for
            `transformer_block`.

    Returns:
        dict stage -> [S, B, J, width] for the stages "query", "key",
        "value", "heads" (concatenated attention heads), "attention" (after
        the output projection), "norm1", "ffn1", "hidden" (after the ReLU),
        "ffn2", "output".
    """
    value_dim = value_dim or key_dim
    num_samples = samples["query"][0].shape[0]
    x = tf.convert_to_tensor(x, tf.float32)
    if x.shape.rank == 3:
        x = tf.broadcast_to(x, [num_samples] + x.shape.as_list())
    out = {key: _dense(x, *samples[key]) for key in ("query", "key", "value")}
    shape = tf.shape(x)
    q = tf.reshape(out["query"], [num_samples, shape[1], shape[2], num_heads, key_dim])
    k = tf.reshape(out["key"], [num_samples, shape[1], shape[2], num_heads, key_dim])
    v = tf.reshape(out["value"], [num_samples, shape[1], shape[2], num_heads, value_dim])
    scores = tf.einsum("sbqhk,sbthk->sbhqt", q, k) / math.sqrt(key_dim)
    if attention_mask is not None:
        mask = tf.broadcast_to(attention_mask, [shape[1], shape[2], shape[2]])
        mask = tf.broadcast_to(mask[None, :, None], tf.shape(scores))
        scores = tf.where(mask, scores, tf.fill(tf.shape(scores), scores.dtype.min))
    weights = tf.nn.softmax(scores, axis=-1)
    if attention_mask is not None:
        weights = tf.where(mask, weights, tf.zeros_like(weights))
    heads = tf.einsum("sbhqt,sbthd->sbqhd", weights, v)
    out["heads"] = tf.reshape(heads, [num_samples, shape[1], shape[2], num_heads * value_dim])
    out["attention"] = _dense(out["heads"], *samples["output"])
    out["norm1"] = _layer_norm(out["attention"] + x, *samples["norm1"], epsilon)
    out["ffn1"] = _dense(out["norm1"], *samples["ffn1"])
    out["hidden"] = tf.nn.relu(out["ffn1"])
    out["ffn2"] = _dense(out["hidden"], *samples["ffn2"])
    out["output"] = _layer_norm(out["ffn2"] + out["norm1"], *samples["norm2"], epsilon)
    return out


def sample_moments(samples, mode="diagonal"):
    """Sample moments of [S, B, ...] samples with standard errors, in float64.

    The standard error of a covariance entry uses the sample variance of
    the products d_u d_v of centred samples: se^2 = (mean(d_u^2 d_v^2) -
    cov_uv^2) / S (the variance of a mean of S products).

    Returns:
        dict of numpy arrays: "mean", "mean_se" ([B, ...]); "var",
        "var_se" (mode "diagonal", [B, ...]) or "cov", "cov_se" (mode
        "full", [B, N, N] over the row-major flattening).
    """
    x = np.asarray(samples, dtype=np.float64)
    count = x.shape[0]
    mean = x.mean(axis=0)
    d = x - mean
    result = {"mean": mean, "mean_se": d.std(axis=0, ddof=1) / math.sqrt(count)}
    if mode == "diagonal":
        sq = d * d
        result["var"] = sq.sum(axis=0) / (count - 1)
        result["var_se"] = np.sqrt(np.maximum(
            (sq * sq).mean(axis=0) - result["var"] ** 2, 0.0) / count)
        return result
    d = d.reshape(count, d.shape[1], -1)
    cov = np.einsum("sbu,sbv->buv", d, d) / (count - 1)
    fourth = np.einsum("sbu,sbv->buv", d * d, d * d) / count
    result["cov"] = cov
    result["cov_se"] = np.sqrt(np.maximum(fourth - cov**2, 0.0) / count)
    return result


def assert_within_se(exact, estimate, se, name, k=5.0):
    """Asserts |exact - estimate| <= k se + float32 rounding, elementwise.

    The rounding allowance is 1e-5 * max|estimate|: the sampled forward
    passes run in float32 (relative rounding ~1e-6 per operation), which
    only matters where se is ~0 (e.g. a deterministic entry).
    """
    exact = np.asarray(exact, np.float64)
    estimate = np.asarray(estimate, np.float64)
    allowed = k * np.asarray(se) + 1e-5 * np.max(np.abs(estimate))
    excess = np.abs(exact - estimate) - allowed
    worst = np.unravel_index(np.argmax(excess), excess.shape)
    if excess[worst] > 0:
        raise AssertionError(
            f"{name}: {np.sum(excess > 0)} of {excess.size} entries beyond {k} s.e.; worst at "
            f"{worst}: exact {exact[worst]:.6g}, Monte Carlo {estimate[worst]:.6g} "
            f"+- {np.asarray(se)[worst]:.3g}"
        )


# The small block the moment tests compare with sampling: batch, tokens (J),
# width (I), heads, key_dim, ff_dim (a small example: I = 8, J = 4, 2 heads).
SMALL_BLOCK = (2, 4, 8, 2, 4, 16)


def small_block_case(num_samples=10000):
    """(params, x, sampled stages) of `SMALL_BLOCK`, seeded: the shared test case."""
    batch, tokens, width, heads, key_dim, ff_dim = SMALL_BLOCK
    params = random_block_params(0, width, heads, key_dim, ff_dim)
    x = tf.constant(np.random.default_rng(1).normal(size=(batch, tokens, width)), tf.float32)
    stages = sampled_transformer_block(x, sample_params(params, num_samples, seed=2), heads,
                                       key_dim)
    return params, x, stages

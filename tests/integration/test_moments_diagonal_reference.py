"""The optimised diagonal mode against the previous, straightforward implementation.

`_reference_block` below is the diagonal mode of `transformer_block` as it
was before it was rearranged for speed (`transformer._diagonal_block`, the
O(q) softmax rule, two-product `matmul` and `dense` variances, heads kept
in place, one erfc in the ReLU), written out stage by stage: the
[B*H, J, J, J] softmax Jacobian, three products per random matmul, heads
moved into the batch and back, two erfc, the attention weights computed
twice. The maths is the same, so the two must agree to float32 rounding.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import add
from tfp_bnn.moments import dense
from tfp_bnn.moments import layer_norm
from tfp_bnn.moments import matmul
from tfp_bnn.moments import multi_head_attention
from tfp_bnn.moments import relu
from tfp_bnn.moments import softmax
from tfp_bnn.moments import transformer_block
from tfp_bnn.moments.residual import attention_value_correlations
from tfp_bnn.moments.residual import feed_forward_cross_covariance
from tfp_bnn.testing.moments_reference import random_block_params

# ---------------------------------------------------------------- reference
# Plain tensors: (mean, var), var None for a constant.


def _sum(*terms):
    present = [t for t in terms if t is not None]
    return tf.add_n(present) if len(present) > 1 else (present[0] if present else None)


def _ref_dense(m, v, kernel_loc, kernel_var, bias_loc, bias_var):
    mean = tf.matmul(m, kernel_loc)
    if bias_loc is not None:
        mean = mean + bias_loc
    terms = []
    if v is not None:
        terms.append(tf.matmul(v, tf.square(kernel_loc)))
    if kernel_var is not None:
        second = tf.square(m) if v is None else v + tf.square(m)
        terms.append(tf.matmul(second, kernel_var))
    if bias_var is not None:
        terms.append(tf.broadcast_to(bias_var, tf.shape(mean)))
    return mean, _sum(*terms)


def _ref_matmul(ma, va, mb, vb):
    terms = []
    if vb is not None:
        terms.append(tf.matmul(tf.square(ma), vb))
    if va is not None:
        terms.append(tf.matmul(va, tf.square(mb)))
    if va is not None and vb is not None:
        terms.append(tf.matmul(va, vb))
    return tf.matmul(ma, mb), _sum(*terms)


def _ref_softmax(m, v, mask):
    logits = m
    if mask is not None:
        mask = tf.broadcast_to(mask, tf.shape(logits))
        logits = tf.where(mask, logits, tf.fill(tf.shape(logits), logits.dtype.min))
    p = tf.nn.softmax(logits, axis=-1)
    if mask is not None:
        p = tf.where(mask, p, tf.zeros_like(p))
    if v is None:
        return p, None
    jac = tf.linalg.diag(p) - tf.einsum("bai,baj->baij", p, p)
    return p, tf.einsum("baij,baj->bai", tf.square(jac), v)


def _split(t, heads):
    if t is None:
        return None
    tokens, width = t.shape[1:]
    t = tf.reshape(t, [-1, tokens, heads, width // heads])
    return tf.reshape(tf.transpose(t, [0, 2, 1, 3]), [-1, tokens, width // heads])


def _merge(t, heads):
    if t is None:
        return None
    tokens, depth = t.shape[1:]
    t = tf.reshape(t, [-1, heads, tokens, depth])
    return tf.reshape(tf.transpose(t, [0, 2, 1, 3]), [-1, tokens, heads * depth])


def _ref_attention(q, k, v, heads, mask):
    if mask is not None:
        shape = [q[0].shape[1], k[0].shape[1]]
        mask = tf.broadcast_to(mask, [tf.shape(q[0])[0]] + shape)
        mask = tf.reshape(tf.repeat(mask[:, None], heads, axis=1), [-1] + shape)
    (qm, qv), (km, kv), (vm, vv) = [(_split(m, heads), _split(c, heads)) for m, c in (q, k, v)]
    factor = 1.0 / math.sqrt(qm.shape[-1])
    sm, sv = _ref_matmul(qm, qv, tf.transpose(km, [0, 2, 1]),
                         None if kv is None else tf.transpose(kv, [0, 2, 1]))
    sm, sv = sm * factor, None if sv is None else sv * (factor * factor)
    pm, pv = _ref_softmax(sm, sv, mask)
    om, ov = _ref_matmul(pm, pv, vm, vv)
    return _merge(om, heads), _merge(ov, heads)


def _ref_value_correlations(v, q_mean, k_mean, value_kernel, output_kernel, heads, mask):
    tokens, width = v.shape[1:]
    key_dim = q_mean.shape[-1] // heads
    value_dim = value_kernel.shape[-1] // heads
    q = tf.reshape(q_mean, [-1, tokens, heads, key_dim])
    k = tf.reshape(k_mean, [-1, tokens, heads, key_dim])
    scores = tf.einsum("bjhd,bthd->bhjt", q, k) / math.sqrt(key_dim)
    if mask is not None:
        mask = tf.broadcast_to(mask, [tf.shape(scores)[0], tokens, tokens])
        mask = tf.broadcast_to(mask[:, None], tf.shape(scores))
        scores = tf.where(mask, scores, tf.fill(tf.shape(scores), scores.dtype.min))
    p = tf.nn.softmax(scores, axis=-1)
    if mask is not None:
        p = tf.where(mask, p, tf.zeros_like(p))
    w_v = tf.reshape(value_kernel, [width, heads, value_dim])
    w_o = tf.reshape(output_kernel, [heads, value_dim, width])
    maps = tf.einsum("ihd,hdo->hoi", w_v, w_o)
    cross = v * tf.einsum("bhj,hi->bji", tf.linalg.diag_part(p), tf.linalg.diag_part(maps))
    other = 1.0 - tf.eye(heads, dtype=p.dtype)
    pairs = tf.einsum("bhjl,bgjl,hg->bhgjl", p, p, other)
    weighted = tf.einsum("bhgjl,bli->bhgji", pairs, v)
    between = tf.einsum("bhgji,hgoi->bjo", weighted, tf.einsum("hoi,goi->hgoi", maps, maps))
    return cross, between


def _ref_layer_norm(m, v, gamma_loc, gamma_var, beta_loc, beta_var, epsilon, method):
    width = m.shape[-1]
    if gamma_loc is None:
        gamma_loc = tf.ones([width], tf.float32)
    mc = m - tf.reduce_mean(m, axis=-1, keepdims=True)
    expected_var = tf.reduce_mean(tf.square(mc), axis=-1)
    cc = None
    if v is not None:
        total = tf.reduce_sum(v, axis=-1, keepdims=True)
        cc = v * (1.0 - 2.0 / width) + total / width**2
        expected_var = expected_var + tf.reduce_sum(cc, axis=-1) / width
    s = tf.sqrt(expected_var + epsilon)
    mu = mc / s[..., None]
    mean = gamma_loc * mu
    if beta_loc is not None:
        mean = mean + beta_loc
    if cc is None and gamma_var is None and beta_var is None:
        return mean, None
    vu = None
    if cc is not None and method == "constant":
        vu = cc / tf.square(s)[..., None]
    elif cc is not None:
        sums = [tf.reduce_sum(v * mu**power, axis=-1, keepdims=True) for power in (0, 1, 2)]
        vu = (v * (1.0 - 2.0 * (1.0 + tf.square(mu)) / width)
              + (sums[0] + 2.0 * mu * sums[1] + tf.square(mu) * sums[2]) / width**2)
        vu = vu / tf.square(s)[..., None]
    terms = []
    if vu is not None:
        terms.append(vu * tf.square(gamma_loc))
    if gamma_var is not None:
        terms.append(gamma_var * (tf.square(mu) if vu is None else vu + tf.square(mu)))
    if beta_var is not None:
        terms.append(tf.broadcast_to(beta_var, tf.shape(mu)))
    return mean, _sum(*terms)


def _ref_rectified_gaussian(mean, variance):
    random = variance > 0
    s = tf.sqrt(tf.where(random, variance, tf.ones_like(variance)))
    alpha = mean / s
    cdf = 0.5 * tf.math.erfc(-alpha / math.sqrt(2.0))
    upper = 0.5 * tf.math.erfc(alpha / math.sqrt(2.0))
    pdf = tf.exp(-0.5 * tf.square(alpha)) / math.sqrt(2.0 * math.pi)
    t = alpha * cdf + pdf
    gap = pdf - alpha * upper
    var_ratio = tf.maximum(cdf - t * gap, tf.square(cdf))
    out_mean = tf.where(random, s * t, tf.nn.relu(mean))
    out_var = tf.where(random, variance * var_ratio, tf.zeros_like(variance))
    slope = tf.where(random, cdf, tf.cast(mean > 0, mean.dtype))
    return out_mean, out_var, slope


def _ref_add(a, b, cross=None):
    var = _sum(a[1], b[1])
    if cross is not None:
        # Cauchy-Schwarz: |Cov[a, b]| <= sqrt(Var a Var b) (residual.bounded_cross).
        if a[1] is None or b[1] is None:
            cross = tf.zeros_like(cross)
        else:
            limit = tf.sqrt(tf.maximum(a[1] * b[1], 1e-30))
            cross = tf.minimum(tf.maximum(cross, -limit), limit)
        var = _sum(var, 2.0 * cross)
    return a[0] + b[0], var


def _reference_block(m, v, params, heads, mask=None, epsilon=1e-3, relu_method="exact",
                     layer_norm_method="linearized", residual_covariance=True):
    """The previous diagonal mode of `transformer_block`: (mean, variances)."""
    x = (m, v)
    q = _ref_dense(m, v, *params["query"])
    k = _ref_dense(m, v, *params["key"])
    val = _ref_dense(m, v, *params["value"])
    a = _ref_dense(*_ref_attention(q, k, val, heads, mask), *params["output"])
    cross = None
    if residual_covariance and v is not None:
        cross, between = _ref_value_correlations(v, q[0], k[0], params["value"][0],
                                                 params["output"][0], heads, mask)
        a = (a[0], a[1] + between)
    z = _ref_layer_norm(*_ref_add(a, x, cross), *params["norm1"], epsilon, layer_norm_method)
    pre = _ref_dense(*z, *params["ffn1"])
    pre_var = tf.zeros_like(pre[0]) if pre[1] is None else pre[1]
    if pre[1] is None:
        hidden = (tf.nn.relu(pre[0]), None)
    elif relu_method == "exact":
        hidden = _ref_rectified_gaussian(*pre)[:2]
    else:
        hidden = (tf.nn.relu(pre[0]), pre[1] * tf.cast(pre[0] > 0, tf.float32))
    y = _ref_dense(*hidden, *params["ffn2"])
    cross = None
    if residual_covariance and z[1] is not None:
        if relu_method == "exact":
            slope = _ref_rectified_gaussian(pre[0], pre_var)[2]
        else:
            slope = tf.cast(pre[0] > 0, tf.float32)
        paired = tf.transpose(params["ffn1"][0]) * params["ffn2"][0]
        cross = z[1] * tf.einsum("bjk,ki->bji", slope, paired)
    return _ref_layer_norm(*_ref_add(y, z, cross), *params["norm2"], epsilon, layer_norm_method)


# ---------------------------------------------------------------- tests

BATCH, TOKENS, WIDTH, HEADS, KEY_DIM, FF_DIM = 3, 6, 8, 2, 4, 16


def _inputs(seed, heads=HEADS, key_dim=KEY_DIM, std=0.1, width=WIDTH):
    params = random_block_params(seed, width, heads, key_dim, FF_DIM, std=std)
    rng = np.random.default_rng(seed + 100)
    x = tf.constant(rng.normal(size=(BATCH, TOKENS, width)), tf.float32)
    var = tf.constant(rng.uniform(0.01, 0.2, size=(BATCH, TOKENS, width)), tf.float32)
    return params, x, var


def _assert_close(got, expected, what):
    got, expected = np.asarray(got), np.asarray(expected)
    # float32 rounding, relative to each tensor's scale.
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6 * np.abs(expected).max(),
                               err_msg=what)


MASK = np.tril(np.ones([TOKENS, TOKENS], bool))
CASES = {
    "defaults": {},
    "masked": {"mask": True},
    "constant_norm_independent": {"layer_norm_method": "constant", "residual_covariance": False},
    "taylor_relu": {"relu": "taylor"},
    "four_heads": {"heads": 4, "key_dim": 2},
    "one_head": {"heads": 1, "key_dim": 8},
    "large_noise": {"std": 0.5},
}


def _case(case, random_input):
    """A case's inputs: (x, var or None, params) and (heads, key_dim, mask, options)."""
    options = dict(CASES[case])
    heads, key_dim = options.pop("heads", HEADS), options.pop("key_dim", KEY_DIM)
    params, x, var = _inputs(3, heads, key_dim, std=options.pop("std", 0.1))
    mask = tf.constant(MASK) if options.pop("mask", False) else None
    return (x, var if random_input else None, params), (heads, key_dim, mask, options)


def _block(values, structure):
    (x, var, params), (heads, key_dim, mask, options) = values, structure
    out = transformer_block(x if var is None else Moments(x, var), params, heads, key_dim,
                            attention_mask=mask, **options)
    return out.mean, out.cov


INPUTS = {"constant_x": False, "random_x": True}


@pytest.fixture(scope="module")
def xla_outputs():
    """Every case's block on both inputs under XLA, from one compiled function.

    The 14 blocks are independent subgraphs of one XLA computation, each with its
    own parameters and inputs as arguments; one compilation costs about half of 14
    separate ones (5 s against 11 s on 2 cores: most of each is per-compile overhead).
    No autograph: the moment functions have no tensor-dependent Python control flow,
    and converting them costs seconds of CPU on the first trace without changing the
    graph.
    """
    keys = [(case, name) for case in CASES for name in INPUTS]
    cases = {f"{case}-{name}": _case(case, INPUTS[name]) for case, name in keys}

    @tf.function(jit_compile=True, autograph=False)
    def run(values):
        return {key: _block(values[key], cases[key][1]) for key in cases}

    return run({key: case[0] for key, case in cases.items()})


@pytest.mark.parametrize("name", list(INPUTS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
def test_diagonal_block_equals_reference(case, name, jit, request):
    values, structure = _case(case, INPUTS[name])
    if jit:
        mean, cov = request.getfixturevalue("xla_outputs")[f"{case}-{name}"]
    else:
        mean, cov = _block(values, structure)
    (x, var, params), (heads, _, mask, options) = values, structure
    ref_options = {"relu_method": options.get("relu", "exact"),
                   **{k: v for k, v in options.items() if k != "relu"}}
    ref_mean, ref_var = _reference_block(x, var, params, heads, mask, **ref_options)
    _assert_close(mean, ref_mean, "mean")
    _assert_close(cov, ref_var, "variance")


def test_second_block_equals_reference():
    """Two blocks chained (random input to the second), under XLA."""
    params, x, _ = _inputs(4)
    params2, _, _ = _inputs(5)

    @tf.function(jit_compile=True, autograph=False)
    def run(x):
        first = transformer_block(x, params, HEADS, KEY_DIM)
        out = transformer_block(first, params2, HEADS, KEY_DIM)
        return out.mean, out.cov

    mean, var = run(x)
    ref = _reference_block(*_reference_block(x, None, params, HEADS), params2, HEADS)
    _assert_close(mean, ref[0], "mean")
    _assert_close(var, ref[1], "variance")


def test_deterministic_parameters_and_input():
    """No variance anywhere: the covariance stays None, as before."""
    params, x, _ = _inputs(6)
    params = {key: (p[0], None, p[2], None) for key, p in params.items()}
    out = transformer_block(x, params, HEADS, KEY_DIM)
    assert out.cov is None
    _assert_close(out.mean, _reference_block(x, None, params, HEADS)[0], "mean")


def test_partly_deterministic_parameters():
    """Some kernels or biases deterministic (None variances): zeros in the fused products."""
    params, x, var = _inputs(7)
    params = dict(params)
    params["key"] = (params["key"][0], None, params["key"][2], None)
    params["value"] = (params["value"][0], params["value"][1], None, None)
    params["ffn1"] = (params["ffn1"][0], None, params["ffn1"][2], params["ffn1"][3])
    for v in (None, var):
        out = transformer_block(x if v is None else Moments(x, v), params, HEADS, KEY_DIM)
        ref = _reference_block(x, v, params, HEADS)
        _assert_close(out.mean, ref[0], "mean")
        _assert_close(out.cov, ref[1], "variance")


# Stage by stage: each public function's diagonal mode against the old rule.

def _random(seed, shape, scale=1.0):
    rng = np.random.default_rng(seed)
    return (tf.constant(scale * rng.normal(size=shape), tf.float32),
            tf.constant(rng.uniform(0.01, 0.3, size=shape), tf.float32))


def test_stages_equal_reference():
    params, _, _ = _inputs(8)
    m, v = _random(0, (BATCH, TOKENS, WIDTH))
    for key in ("query", "ffn1"):
        for var in (None, v):
            out = dense(Moments(m, var), *params[key])
            ref = _ref_dense(m, var, *params[key])
            _assert_close(out.mean, ref[0], f"dense {key} mean")
            _assert_close(out.cov, ref[1], f"dense {key} var")
    a, av = _random(1, (BATCH, 5, 7))
    b, bv = _random(2, (BATCH, 7, 4))
    for va, vb in ((av, bv), (None, bv), (av, None)):
        out = matmul(Moments(a, va), Moments(b, vb))
        ref = _ref_matmul(a, va, b, vb)
        _assert_close(out.mean, ref[0], "matmul mean")
        _assert_close(out.cov, ref[1], "matmul var")
    # Saturated rows too (logit scale 8): the O(q) rule keeps its precision.
    for scale in (1.0, 8.0):
        s, sv = _random(3, (BATCH, 5, 9), scale)
        mask = np.ones([BATCH, 5, 9], bool)
        mask[0, :, 2] = False
        mask[1, 3] = False
        for mk in (None, tf.constant(mask)):
            out = softmax(Moments(s, sv), mk)
            ref = _ref_softmax(s, sv, mk)
            np.testing.assert_array_equal(out.mean, ref[0])
            _assert_close(out.cov, ref[1], "softmax var")
            # Elementwise too, down to ~1e-14 of the row's sum_j p_j^2 v_j (the
            # float64 leave-one-out sum's precision, see softmax.diagonal_variance).
            p = ref[0].numpy().astype(np.float64)
            row = np.sum(p**2 * sv.numpy(), axis=-1, keepdims=True)
            got, expected = out.cov.numpy(), ref[1].numpy()
            assert np.all(np.abs(got - expected) <= 1e-4 * np.abs(expected) + 1e-14 * row)
    q, k, val = [_dense_pair(m, v, params[key]) for key in ("query", "key", "value")]
    for mask in (None, tf.constant(MASK)):
        out = multi_head_attention(Moments(*q), Moments(*k), Moments(*val), HEADS, mask)
        ref = _ref_attention(q, k, val, HEADS, mask)
        _assert_close(out.mean, ref[0], "attention mean")
        _assert_close(out.cov, ref[1], "attention var")
        got = attention_value_correlations(Moments(m, v), q[0], k[0], params["value"][0],
                                           params["output"][0], HEADS, mask)
        ref = _ref_value_correlations(v, q[0], k[0], params["value"][0], params["output"][0],
                                      HEADS, mask)
        _assert_close(got[0], ref[0], "value cross")
        _assert_close(got[1], ref[1], "between heads")
    for method in ("linearized", "constant"):
        out = layer_norm(Moments(m, v), *params["norm1"], method=method)
        ref = _ref_layer_norm(m, v, *params["norm1"], 1e-3, method)
        _assert_close(out.mean, ref[0], "layer_norm mean")
        _assert_close(out.cov, ref[1], "layer_norm var")
    h, hv = _random(4, (BATCH, TOKENS, FF_DIM), 2.0)
    hv = tf.where(tf.constant(np.arange(FF_DIM) % 5 == 0), 0.0, hv)  # some exact zeros
    out = relu(Moments(h, hv))
    ref = _ref_rectified_gaussian(h, hv)
    _assert_close(out.mean, ref[0], "relu mean")
    _assert_close(out.cov, ref[1], "relu var")
    z = (m, v)
    slope = _ref_rectified_gaussian(h, hv)[2]
    got = add(Moments(*z), Moments(h[..., :WIDTH], hv[..., :WIDTH]),
              feed_forward_cross_covariance(Moments(*z), slope, params["ffn1"][0],
                                            params["ffn2"][0]))
    paired = tf.transpose(params["ffn1"][0]) * params["ffn2"][0]
    ref = _ref_add(z, (h[..., :WIDTH], hv[..., :WIDTH]),
                   v * tf.einsum("bjk,ki->bji", slope, paired))
    _assert_close(got.mean, ref[0], "residual mean")
    _assert_close(got.cov, ref[1], "residual var")


def _dense_pair(m, v, p):
    out = dense(Moments(m, v), *p)
    return out.mean, out.cov


def test_unknown_batch_under_xla():
    """A traced None batch dimension (as in Keras predict), masked, random input."""
    params, x, var = _inputs(9)
    spec = tf.TensorSpec([None, TOKENS, WIDTH], tf.float32)
    mask = tf.constant(MASK)

    @tf.function(jit_compile=True, autograph=False, input_signature=[spec, spec])
    def run(x, var):
        out = transformer_block(Moments(x, var), params, HEADS, KEY_DIM, attention_mask=mask)
        return out.mean, out.cov

    mean, cov = run(x, var)
    ref = _reference_block(x, var, params, HEADS, mask)
    _assert_close(mean, ref[0], "mean")
    _assert_close(cov, ref[1], "variance")

"""Numeric safety of the composite layers and the heads (issue 7, point 4).

Every posterior scale parameter rho (sigma = softplus(rho)) at +50 and -50,
float16 and float32 inputs, in training mode (and the sampling-free moment
path of the transformer block): the loss, the KL terms and every gradient
are finite. Heads: logits +-1e3, log variances +-50, residuals 0 and 1e3.

Under a float16 *compute* dtype rho = +50 is tested only where the
activations stay representable: weights of standard deviation 50 multiply
activations by ~50 sqrt(fan_in) per layer, so a block's feed-forward output
passes 65504 (float16's largest number) whatever the formulation; rho = -50
is tested for every layer under mixed_float16 too.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn import moments
from tfp_bnn.layers import HeteroscedasticClassification
from tfp_bnn.layers import HeteroscedasticRegression
from tfp_bnn.layers import HomoscedasticNoise
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.moments.relu import rectified_gaussian
from zoo.models.transformer import TokenTransformerRegressor

RHOS = [50.0, -50.0]
SHAPE = (2, 3, 4)  # batch, tokens, width
SCCE = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _finite(value):
    return bool(np.all(np.isfinite(np.asarray(value, np.float64))))


def _inputs(dtype, shape=SHAPE, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=shape), dtype)


def _set_rho(layer, value):
    """Sets every posterior scale parameter (kernel_rho, bias_rho) of `layer` to `value`."""
    rhos = [v for v in layer.trainable_variables if v.path.endswith("_rho")]
    assert rhos, "no rho variable found"
    for rho in rhos:
        rho.assign(tf.fill(rho.shape, value))


def _assert_gradients_finite(variables, grads):
    for variable, grad in zip(variables, grads):
        assert grad is not None, variable.path
        assert _finite(grad), variable.path


def _training_step(layer, call):
    """Loss = mean(outputs^2) + KL of one training call: (outputs, loss, KL, gradients).

    No autograph: the step has no tensor-dependent Python control flow, and
    converting the library's code costs more than the rest of the trace.
    """

    @tf.function(autograph=False)
    def step(x):
        with tf.GradientTape() as tape:
            outputs = call(x)
            kl = tf.add_n(layer.losses)
            loss = tf.reduce_mean(tf.square(tf.cast(outputs, "float32"))) + kl
        return outputs, loss, kl, tape.gradient(loss, layer.trainable_variables)

    return step


def _check_training_step(layer, step, inputs):
    """The loss, the KL and every gradient of `step` are finite."""
    for x in inputs:
        outputs, loss, kl, grads = step(x)
        assert kl.dtype == tf.float32
        assert _finite(outputs) and _finite(loss) and _finite(kl)
        _assert_gradients_finite(layer.trainable_variables, grads)


@pytest.fixture(scope="module")
def shared():
    """`shared(key, build)` -> `build()`, built (and its steps traced) once per module.

    `build` returns (layer or model, step function, ...). Every call restores
    all of the layer's variables, seed generator states included, to their
    values after `build`, so each case runs as on a fresh layer, in any order.
    """
    cache = {}

    def get(key, build):
        if key not in cache:
            built = build()
            cache[key] = (built, [v.numpy() for v in built[0].variables])
        built, initial = cache[key]
        for variable, value in zip(built[0].variables, initial):
            variable.assign(value)
        return built

    return get


def _layer_norm(policy):
    layer = BayesianLayerNormalization(kl_weight=0.1, seed=0, dtype=policy)
    layer.build(SHAPE)
    return layer, lambda x: layer(x, training=True)


def _attention(policy, estimator="reparameterization"):
    layer = BayesianMultiHeadAttention(2, 2, estimator=estimator, bayesian_bias=True,
                                       kl_weight=0.1, seed=0, dtype=policy)
    layer.build(SHAPE, SHAPE)
    return layer, lambda x: layer(x, x, training=True)


def _block(policy, estimator):
    layer = BayesianTransformerBlock(2, 4, estimator=estimator, bayesian_bias=True,
                                     kl_weight=0.1, seed=0, dtype=policy)
    layer.build(SHAPE)
    return layer, lambda x: layer(x, training=True)


# The attention projections use reparameterization; the block's (and its
# feed-forward layers') Flipout, so both estimators are covered.
LAYERS = {
    "layer_norm": _layer_norm,
    "attention": _attention,
    "block": lambda policy: _block(policy, "flipout"),
}


def _layer_with_step(name, policy):
    layer, call = LAYERS[name](policy)
    return layer, _training_step(layer, call)


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_training_call_at_extreme_rho_is_finite(shared, name, rho):
    layer, step = shared((name, "float32"), lambda: _layer_with_step(name, "float32"))
    _set_rho(layer, rho)
    _check_training_step(layer, step, [_inputs("float32"), _inputs("float16")])


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_float16_compute_at_rho_minus_50_is_finite(shared, name):
    layer, step = shared((name, "mixed_float16"), lambda: _layer_with_step(name, "mixed_float16"))
    _set_rho(layer, -50.0)
    _check_training_step(layer, step, [_inputs("float16")])


def test_float16_layer_norm_at_rho_plus_50_is_finite(shared):
    layer, step = shared(("layer_norm", "mixed_float16"),
                         lambda: _layer_with_step("layer_norm", "mixed_float16"))
    _set_rho(layer, 50.0)
    _check_training_step(layer, step, [_inputs("float16")])


def test_float16_attention_scores_beyond_float16_range_stay_finite(shared):
    # q = k = 250 per entry, so q . k / sqrt(2) = 88388 > 65504: a float16
    # score was inf and its softmax NaN. Values and output stay small.
    layer, step = shared(("attention", "mixed_float16"),
                         lambda: _layer_with_step("attention", "mixed_float16"))
    _set_rho(layer, -50.0)
    for dense, loc in ((layer.query_dense, 62.5), (layer.key_dense, 62.5),
                       (layer.value_dense, 0.1), (layer.output_dense, 0.1)):
        dense.kernel_params[0].assign(tf.fill(dense.kernel_params[0].shape, loc))
    x = tf.ones(SHAPE, "float16")
    outputs, scores = layer(x, x, training=True, return_attention_scores=True)
    assert outputs.dtype == tf.float16 and _finite(outputs)
    np.testing.assert_allclose(tf.cast(scores, "float32").numpy(), 1.0 / SHAPE[1], rtol=1e-3)
    _check_training_step(layer, step, [x])


# -- the transformer block's sampling-free moment path ---------------------------

def _moment_block_with_step():
    block, _ = _block("float32", "reparameterization")

    @tf.function(autograph=False)
    def step(x):
        with tf.GradientTape() as tape:
            params = block.moment_parameters()
            kl = tf.add_n([layer.kl_penalty(tf.shape(x)[0])
                           for layer in tfp_bnn.bayesian_layers(block)])
            # A constant input, then the propagated moments as the input of a
            # second block in both modes: the random-input rules.
            hidden = moments.transformer_block(x, params, 2, 2, mode="diagonal")
            outputs = {mode: moments.transformer_block(hidden.as_mode(mode), params, 2, 2,
                                                       mode=mode)
                       for mode in ("diagonal", "full")}
            loss = kl
            for out in outputs.values():
                loss += tf.reduce_mean(tf.square(out.mean)) + tf.reduce_mean(out.variance())
        outputs = {mode: (out.mean, out.variance()) for mode, out in outputs.items()}
        return outputs, loss, tape.gradient(loss, block.trainable_variables)

    return block, step


@pytest.mark.parametrize("rho", RHOS)
def test_moment_path_at_extreme_rho_is_finite(shared, rho):
    # One block and one traced step for both values: rho is a variable.
    block, step = shared("moment_block", _moment_block_with_step)
    _set_rho(block, rho)
    # float16 activations are widened to float32 on entry (they were refused),
    # so this is also the float32 computation on the same values.
    outputs, loss, grads = step(_inputs("float16"))
    for mode, (mean, variance) in outputs.items():
        assert mean.dtype == tf.float32 and _finite(mean) and _finite(variance), mode
        assert np.all(variance.numpy() >= 0), mode
    assert _finite(loss)
    _assert_gradients_finite(block.trainable_variables, grads)


def test_moment_relu_of_huge_mean_over_tiny_std_has_finite_gradients():
    # alpha = m / s up to 1e34: d alpha / d s = -m / s^2 overflowed to inf
    # (NaN after the product with zero) for v ~ 1e-37, i.e. posterior
    # scales softplus(rho) at rho ~ -42 in the layer before.
    mean = tf.constant([1e3, -1e3, 1e-20, 1.0, 1e30, 0.5])
    variance = tf.constant([1e-37, 1e-37, 1e-37, 1.2e-38, 1.0, 0.0])
    for fn in (rectified_gaussian, tf.function(rectified_gaussian, jit_compile=True)):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([mean, variance])
            out_mean, out_var, slope = fn(mean, variance)
            total = tf.reduce_sum(out_mean) + tf.reduce_sum(out_var) + tf.reduce_sum(slope)
        for grad in tape.gradient(total, [mean, variance]):
            assert _finite(grad)
        # The saturated units are relu(m) with variance v 1[m > 0] and slope 1[m > 0].
        np.testing.assert_allclose(out_mean.numpy()[[0, 1, 3, 4, 5]],
                                   [1e3, 0.0, 1.0, 1e30, 0.5], rtol=1e-6)
        np.testing.assert_allclose(out_var.numpy()[[0, 1, 3, 4, 5]],
                                   [1e-37, 0.0, 1.2e-38, 1.0, 0.0], rtol=1e-6)
        np.testing.assert_array_equal(slope.numpy()[[0, 1, 3, 4, 5]], [1, 0, 1, 1, 1])
        # d E[relu] / d m = Phi(alpha): 1 and 0 at the saturated units.
        np.testing.assert_allclose(tape.gradient(out_mean, mean).numpy()[[0, 1, 3, 4]],
                                   [1.0, 0.0, 1.0, 1.0])


def _moment_model_with_step():
    model = TokenTransformerRegressor(3, width=4, num_heads=2, ff_dim=4, path="moments",
                                      mode="diagonal", seed=0)
    model.build((None, 3))
    y = tf.constant([[0.0], [1e3], [-1.0], [2.0]])
    loss_fn = tfp_bnn.losses.MomentGaussianNLL(mode="diagonal")

    @tf.function(autograph=False)
    def step(x):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) + tf.add_n(model.losses)
        return loss, tape.gradient(loss, model.trainable_variables)

    return model, step


@pytest.mark.parametrize("rho", RHOS)
def test_moment_trained_transformer_model_at_extreme_rho_is_finite(shared, rho):
    model, step = shared("moment_model", _moment_model_with_step)
    _set_rho(model, rho)
    loss, grads = step(_inputs("float16", (4, 3)))  # the model widens its inputs
    assert _finite(loss)
    _assert_gradients_finite(model.trainable_variables, grads)


# -- heads ------------------------------------------------------------------------

def _head_step(head, loss_fn, y):
    """Loss of one training call + the head's KL: (outputs, loss, gradients w.r.t.
    the predictions and the variables)."""

    @tf.function(autograph=False)
    def step(x):
        with tf.GradientTape() as tape:
            outputs = head(x, training=True)
            tape.watch(outputs)
            loss = loss_fn(y, outputs)
            if head.losses:
                loss = loss + tf.add_n(head.losses)
        grads = tape.gradient(loss, [outputs] + head.trainable_variables)
        return outputs, loss, grads

    return step


def _check_head_step(head, step, inputs):
    """Loss and outputs finite, with finite gradients w.r.t. the variables and the predictions."""
    results = []
    for x in inputs:
        outputs, loss, grads = step(x)
        assert _finite(outputs) and _finite(loss), (outputs, loss)
        assert _finite(grads[0]), "gradient w.r.t. the predictions"
        _assert_gradients_finite(head.trainable_variables, grads[1:])
        results.append(outputs)
    return results


HEAD_INPUTS = [("float32", (4, 3)), ("float16", (4, 3))]
REGRESSION_Y = [[0.0], [1e3], [-1e3], [0.0]]  # residuals 0 and 1e3


# (projection, rho) pairs; rho None for the deterministic projection.
PROJECTIONS = [("dense", None), ("flipout", 50.0), ("reparameterization", -50.0)]


def _classification_head(projection, policy):
    extra = {} if projection == "dense" else {"kl_weight": 0.1}
    head = HeteroscedasticClassification(3, num_samples=20, projection=projection, seed=0,
                                         kernel_initializer="zeros", dtype=policy, **extra)
    head.build((None, 3))
    return head, _head_step(head, SCCE, tf.constant([0, 1, 2, 1]))


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
@pytest.mark.parametrize("log_var", [-50.0, 50.0])
@pytest.mark.parametrize("projection,rho", PROJECTIONS)
def test_heteroscedastic_classification_extreme_logits_and_variances(shared, projection, rho,
                                                                    log_var, policy):
    # One head and traced step per (projection, policy), shared by both log_var.
    head, step = shared(("classification", projection, policy),
                        lambda: _classification_head(projection, policy))
    # Mean logits [1e3, -1e3, 0], log variances log_var, plus the kernel noise.
    head.projection_layer.bias.assign([1e3, -1e3, 0.0, log_var, log_var, log_var])
    if rho is not None:
        _set_rho(head.projection_layer, rho)
    outputs = _check_head_step(head, step, [_inputs(*args) for args in HEAD_INPUTS])
    for out in outputs:
        # The Monte Carlo log-mean-exp is float32 even under float16 compute,
        # where exp(s / 2) overflowed from s ~ 22 (NaN log-probabilities).
        assert out.dtype == tf.float32
        np.testing.assert_allclose(np.exp(out.numpy().astype(np.float64)).sum(-1), 1.0,
                                   atol=1e-5)


def _regression_head(projection, **kwargs):
    extra = {} if projection == "dense" else {"kl_weight": 0.1}
    head = HeteroscedasticRegression(1, projection=projection, kernel_initializer="zeros",
                                     parameterization="log_variance", **extra, **kwargs)
    head.build((None, 3))
    return head, _head_step(head, GaussianNLL(), tf.constant(REGRESSION_Y))


def _set_regression_head(head, rho, log_var):
    head.projection_layer.bias.assign([0.0, log_var])
    if rho is not None:
        _set_rho(head.projection_layer, rho)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
@pytest.mark.parametrize("projection,rho", [("dense", None), ("flipout", -50.0),
                                            ("reparameterization", -50.0)])
def test_heteroscedastic_regression_log_variance_pm_50(shared, projection, rho, log_var):
    head, step = shared(("regression", projection), lambda: _regression_head(projection))
    _set_regression_head(head, rho, log_var)
    y = tf.constant(REGRESSION_Y)
    (out32, out16) = _check_head_step(head, step, [_inputs(*args) for args in HEAD_INPUTS])
    np.testing.assert_allclose(out32[:, 1], log_var, rtol=1e-6)
    nll = GaussianNLL()(y, out32)
    expected = np.mean([0.5 * math.log(2 * math.pi) + 0.5 * log_var
                        + 0.5 * r**2 * math.exp(-log_var) for r in (0.0, 1e3, 1e3, 0.0)])
    assert float(nll) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("projection", ["flipout", "reparameterization"])
def test_heteroscedastic_regression_bounded_at_extreme_rho(shared, projection, rho):
    # With sigma = 50 kernels an unbounded s reaches +-hundreds and the NLL
    # exp(-s) r^2 passes float32 by itself; the documented soft bounds keep
    # s in [-50, 50], where loss and gradients are float32 numbers.
    head, step = shared(("bounded_regression", projection),
                        lambda: _regression_head(projection, min_log_variance=-50.0,
                                                 max_log_variance=50.0))
    _set_regression_head(head, rho, 0.0)
    for out in _check_head_step(head, step, [_inputs(*args) for args in HEAD_INPUTS]):
        assert np.all(np.abs(out.numpy()[:, 1]) <= 50.0)


@pytest.mark.parametrize("log_var", [-50.0, 50.0])
def test_homoscedastic_noise_log_variance_pm_50(log_var):
    layer = HomoscedasticNoise(initial_log_variance=log_var)
    layer.build((None, 1))
    step = _head_step(layer, GaussianNLL(), tf.constant(REGRESSION_Y))
    means = [tf.zeros((4, 1), dtype) for dtype in ("float32", "float16")]
    for out in _check_head_step(layer, step, means):
        np.testing.assert_array_equal(out.numpy()[:, 1], log_var)

"""BayesianMultiHeadAttention: battery, parity with Keras, masks, Monte Carlo prediction."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.predict import MonteCarloRunner
from tfp_bnn.testing.composite_layer_test import run_composite_layer_test

PROJECTIONS = ("query_dense", "key_dense", "value_dense", "output_dense")


def _self_attention(layer, x, **kwargs):
    return layer(x, x, **kwargs)


def _normal(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_heads": 2, "key_dim": 3, "estimator": "flipout", "bayesian_bias": True,
         "dropout": 0.2},
    ],
    ids=["flipout_bayesian_bias_dropout"],
)
def test_standard_battery(kwargs):
    # The reparameterization path is what every other test here runs. Every
    # kernel is [6, 6]: each new weight shape costs an XLA compilation.
    run_composite_layer_test(BayesianMultiHeadAttention, dict(kl_weight=0.01, **kwargs),
                             (3, 4, 6), num_kl_terms=4, call=_self_attention)


def test_config_and_symbolic_shapes_of_cross_attention():
    layer = BayesianMultiHeadAttention(
        num_heads=2, key_dim=3, value_dim=2, output_shape=5, dropout=0.1, use_bias=False,
        kernel_initializer="he_normal", kernel_regularizer="l2", posterior="mean_field_normal",
        prior="scale_mixture", kl_estimator="mc", kl_weight=0.5, seed=3)
    config = layer.get_config()
    assert BayesianMultiHeadAttention.from_config(config).get_config() == config
    query, value, key = keras.Input((4, 6)), keras.Input((7, 3)), keras.Input((7, 2))
    outputs, scores = layer(query, value, key, return_attention_scores=True)
    assert outputs.shape == (None, 4, 5) and scores.shape == (None, 2, 4, 7)
    assert layer.key_dense.kernel_params[0].shape == (2, 6)
    assert layer.value_dense.units == 4 and layer.output_dense.kernel_params[0].shape == (4, 5)
    assert layer.output_dense.prior == layer.prior and layer.output_dense.kl_estimator == "mc"
    outputs, scores = layer(_normal((3, 4, 6), 0), _normal((3, 7, 3), 1), _normal((3, 7, 2), 2),
                            return_attention_scores=True)
    assert outputs.shape == (3, 4, 5) and scores.shape == (3, 2, 4, 7)


def _random_posterior(layer, seed=0):
    """Gives every projection a random posterior mean (and a moderate scale)."""
    rng = np.random.default_rng(seed)
    for name in PROJECTIONS:
        sub = getattr(layer, name)
        for params in (sub.kernel_params, sub.bias_params):
            if params is None:
                continue
            loc, rho = params
            loc.assign(0.5 * rng.normal(size=loc.shape).astype("float32"))
            rho.assign(np.full(rho.shape, -2.0, "float32"))
        if sub.bias_params is None and sub.use_bias:
            sub.bias.assign(0.5 * rng.normal(size=sub.bias.shape).astype("float32"))


def _posterior_means(layer):
    means = {}
    for name in PROJECTIONS:
        kernel, _, bias, _ = layer.__getattribute__(name).posterior_moments()
        means[name] = (np.asarray(kernel), None if bias is None else np.asarray(bias))
    return means


def keras_attention(layer, weights, query, value, key=None):
    """A built `keras.layers.MultiHeadAttention` with the given projection weights.

    `weights` maps each projection to (kernel [d, H*K], bias [H*K]); Keras
    keeps them as EinsumDense kernels [d, H, K] and [H*Dv, out] as [H, Dv, out].
    """
    heads, k_dim, v_dim = layer.num_heads, layer.key_dim, layer.value_dim
    reference = keras.layers.MultiHeadAttention(
        heads, k_dim, value_dim=v_dim, use_bias=layer.use_bias,
        output_shape=layer.output_units)
    reference(query, value, key)
    shapes = {"query_dense": (heads, k_dim), "key_dense": (heads, k_dim),
              "value_dense": (heads, v_dim)}
    targets = {"query_dense": reference._query_dense, "key_dense": reference._key_dense,
               "value_dense": reference._value_dense, "output_dense": reference._output_dense}
    for name, (kernel, bias) in weights.items():
        target = targets[name]
        if name == "output_dense":
            target.kernel.assign(kernel.reshape(heads, v_dim, -1))
        else:
            target.kernel.assign(kernel.reshape((-1,) + shapes[name]))
        if bias is not None:
            target.bias.assign(bias.reshape(target.bias.shape))
    return reference


@pytest.mark.parametrize(
    "case",
    ["self", "cross_key", "mask_rank3", "mask_rank2", "causal", "causal_and_mask", "bias_free"],
)
def test_mean_mode_equals_keras_multi_head_attention(case):
    b, tq, tk = 3, 4, 5
    query = _normal((b, tq, 6), 0)
    value = query if case in ("self", "causal", "bias_free") else _normal((b, tk, 7), 1)
    key = _normal((b, tk, 4), 2) if case == "cross_key" else None
    kv_len = value.shape[1]
    mask = None
    if case in ("mask_rank3", "causal_and_mask"):
        mask = np.random.default_rng(3).uniform(size=(b, tq, kv_len)) < 0.7
        mask[:, :, 0] = True  # every query keeps a key
    if case == "mask_rank2":
        mask = np.random.default_rng(4).uniform(size=(tq, kv_len)) < 0.6
        mask[:, 0] = True
    if case == "causal_and_mask":
        query = value = _normal((b, tq, 6), 5)
        mask = mask[:, :, :tq]
    causal = case.startswith("causal")
    layer = BayesianMultiHeadAttention(
        num_heads=2, key_dim=3, value_dim=4 if case == "cross_key" else None,
        output_shape=5 if case == "cross_key" else None, use_bias=case != "bias_free",
        bayesian_bias=case == "mask_rank3", kl_weight=0.0, seed=7)
    layer(query, value, key)
    _random_posterior(layer)
    tfp_bnn.set_mean_mode(layer)
    ours, our_scores = layer(query, value, key, attention_mask=mask, use_causal_mask=causal,
                             return_attention_scores=True)
    reference = keras_attention(layer, _posterior_means(layer), query, value, key)
    expected, scores = reference(query, value, key, attention_mask=mask, use_causal_mask=causal,
                                 return_attention_scores=True)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(our_scores, scores, rtol=1e-5, atol=1e-6)
    # Keras's fused path (no scores requested) must agree as well.
    np.testing.assert_allclose(
        ours, reference(query, value, key, attention_mask=mask, use_causal_mask=causal),
        rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_masked_keys_get_zero_attention_while_sampling():
    x = _normal((4, 5, 6), 0)
    mask = np.random.default_rng(1).uniform(size=(4, 5, 5)) < 0.5
    mask[:, :, 2] = True
    mask[1, 3, :] = False  # a query with nothing to attend to
    layer = BayesianMultiHeadAttention(num_heads=3, key_dim=2, kl_weight=0.0, seed=1)
    _, first = layer(x, x, attention_mask=mask, return_attention_scores=True)
    _, second = layer(x, x, attention_mask=mask, return_attention_scores=True, training=True)
    assert not np.allclose(first, second)  # the weights were sampled
    for scores in (np.asarray(first), np.asarray(second)):
        assert scores.shape == (4, 3, 5, 5)
        np.testing.assert_array_equal(scores[np.broadcast_to(~mask[:, None], scores.shape)], 0.0)
        sums = scores.sum(-1)
        has_key = np.broadcast_to(mask.any(-1)[:, None], sums.shape)
        np.testing.assert_allclose(sums[has_key], 1.0, rtol=1e-5)
        np.testing.assert_array_equal(sums[~has_key], 0.0)
        assert not has_key[1, :, 3].any()


def test_causal_mask_hides_the_future():
    x = _normal((2, 6, 4), 0)
    layer = BayesianMultiHeadAttention(num_heads=2, key_dim=2, kl_weight=0.0, seed=2)
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    scores = np.asarray(scores)
    future = np.triu(np.ones((6, 6), bool), k=1)
    np.testing.assert_array_equal(scores[..., future], 0.0)
    assert np.all(scores[..., ~future] > 0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, rtol=1e-5)


def test_dropout_acts_on_attention_probabilities_in_training_only():
    x = _normal((3, 5, 6), 0)
    layers = {rate: BayesianMultiHeadAttention(2, 3, dropout=rate, kl_weight=0.0, seed=3)
              for rate in (0.0, 0.5)}
    outputs = {}
    for rate, layer in layers.items():
        layer(x, x)
        for name in PROJECTIONS:  # scale ~ 1e-13: training is deterministic but for dropout
            getattr(layer, name).kernel_params[1].assign(
                np.full(getattr(layer, name).kernel_params[1].shape, -30.0, "float32"))
        tfp_bnn.set_mean_mode(layer)
        outputs[rate] = (np.asarray(layer(x, x)), np.asarray(layer(x, x, training=True)))
    np.testing.assert_allclose(outputs[0.0][1], outputs[0.0][0], atol=1e-6)
    np.testing.assert_allclose(outputs[0.5][0], outputs[0.0][0], atol=1e-6)
    # Half the probabilities dropped changes outputs by O(|output|).
    assert np.abs(outputs[0.5][1] - outputs[0.5][0]).mean() > 0.1 * np.abs(outputs[0.5][0]).mean()


def _mask_model(seed=5):
    query = keras.Input((4, 6), name="x")
    mask = keras.Input((4, 4), dtype="bool", name="mask")
    layer = BayesianMultiHeadAttention(num_heads=2, key_dim=3, bayesian_bias=True,
                                       kl_weight=0.0, seed=seed)
    outputs = layer(query, query, attention_mask=mask)
    return keras.Model([query, mask], outputs), layer


def test_monte_carlo_sample_s_is_the_network_with_weight_sample_s():
    # Inside sample_trace the inputs and the mask input are tiled S times; the
    # output for sample s must be the attention computed with weight draw s.
    model, layer = _mask_model()
    _random_posterior(layer)
    x = _normal((3, 4, 6), 0)
    mask = np.random.default_rng(1).uniform(size=(3, 4, 4)) < 0.6
    mask[:, :, 1] = True
    runner = MonteCarloRunner(model)
    num_samples = 3
    draws = runner.draw(num_samples)
    outputs = np.asarray(runner.call([x, mask], draws, num_samples))
    by_layer = {id(sub): draw for sub, draw in zip(runner.layers, draws)}
    for s in range(num_samples):
        weights = {}
        for name in PROJECTIONS:
            kernels, biases = by_layer[id(getattr(layer, name))]
            weights[name] = (np.asarray(kernels[s]), np.asarray(biases[s]))
        reference = keras_attention(layer, weights, x, x)
        np.testing.assert_allclose(outputs[s], reference(x, x, attention_mask=mask),
                                   rtol=1e-4, atol=1e-5)
    assert not np.allclose(outputs[0], outputs[1])


def test_predict_sample_with_a_mask_input_and_mean_mode():
    model, _ = _mask_model()
    x = _normal((5, 4, 6), 0)
    mask = np.tril(np.ones((4, 4), bool))[None].repeat(5, 0)
    samples = tfp_bnn.predict.sample(model, [x, mask], num_samples=4, batch_size=2)
    assert samples.shape == (4, 5, 4, 6)
    assert not np.allclose(samples[0], samples[1])
    assert tfp_bnn.set_mean_mode(model) == 4
    samples = tfp_bnn.predict.sample(model, [x, mask], num_samples=4)
    np.testing.assert_allclose(samples, np.broadcast_to(model([x, mask]), samples.shape),
                               rtol=1e-5, atol=1e-6)


def test_kl_scheduler_and_kl_terms_reach_the_projections():
    x = _normal((8, 4, 6), 0)
    y = _normal((8, 1), 1)
    inputs = keras.Input((4, 6))
    attention = BayesianMultiHeadAttention(num_heads=2, key_dim=3, seed=0)
    hidden = keras.layers.GlobalAveragePooling1D()(attention(inputs, inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer="adam", loss="mse")
    scheduler = KLScheduler(num_examples=8)
    history = model.fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[scheduler])
    assert len(scheduler._layers) == 4
    for name in PROJECTIONS:
        assert getattr(attention, name).kl_weight.numpy() == pytest.approx(1 / 8)
    exact = sum(float(getattr(attention, name).kl_divergence()) for name in PROJECTIONS)
    # The logged KL is the one before the step's update; a step moves it by < 1 %.
    assert history.history["kl"][0] == pytest.approx(exact / 8, rel=1e-2)
    assert len(model.losses) == 4


# -- bad input ------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"num_heads": 0, "key_dim": 2}, r"`num_heads`.*got 0"),
        ({"num_heads": 2.0, "key_dim": 2}, r"`num_heads`.*2.0"),
        ({"num_heads": 2, "key_dim": -1}, r"`key_dim`.*-1"),
        ({"num_heads": 2, "key_dim": None}, r"`key_dim`.*None"),
        ({"num_heads": 2, "key_dim": 2, "value_dim": 0}, r"`value_dim`.*0"),
        ({"num_heads": 2, "key_dim": 2, "output_shape": (3,)}, r"`output_shape`"),
        ({"num_heads": 2, "key_dim": 2, "dropout": 1.0}, r"`dropout`.*1.0"),
        ({"num_heads": 2, "key_dim": 2, "dropout": -0.1}, r"`dropout`.*-0.1"),
        ({"num_heads": 2, "key_dim": 2, "estimator": "local"}, r"`estimator`.*'local'"),
        ({"num_heads": 2, "key_dim": 2, "estimator": "flipout", "posterior": "flow"},
         r"`posterior`"),
        ({"num_heads": 2, "key_dim": 2, "kl_weight": -1.0}, r"`kl_weight`"),
        ({"num_heads": 2, "key_dim": 2, "kl_estimator": "exact"}, r"`kl_estimator`"),
        ({"num_heads": 2, "key_dim": 2, "seed": -1}, r"`seed`"),
    ],
)
def test_constructor_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        BayesianMultiHeadAttention(**kwargs)


def _unbuilt():
    return BayesianMultiHeadAttention(num_heads=2, key_dim=2, kl_weight=0.0)


def _assert_no_weights(layer):
    assert not layer.built and layer.query_dense is None and not layer.weights


def test_key_and_value_lengths_must_match():
    layer = _unbuilt()
    with pytest.raises(ValueError, match=r"`key` and `value`.*same sequence length"):
        layer(_normal((2, 3, 4), 0), _normal((2, 5, 4), 1), _normal((2, 6, 4), 2))
    _assert_no_weights(layer)
    with pytest.raises(ValueError, match=r"`key` and `value`"):
        layer(keras.Input((3, 4)), keras.Input((5, 4)), keras.Input((6, 4)))
    _assert_no_weights(layer)


@pytest.mark.parametrize(
    "mask_shape",
    [(2, 3, 4), (4, 5), (2, 1, 3, 5), (5,), (3, 3, 5)],
    ids=["swapped", "rank2_wrong", "rank4", "rank1", "batch"],
)
def test_attention_mask_must_broadcast(mask_shape):
    query, value = _normal((2, 3, 4), 0), _normal((2, 5, 4), 1)
    mask = np.ones(mask_shape, bool)
    layer = _unbuilt()
    with pytest.raises(ValueError, match=r"`attention_mask` must broadcast to .*\[2, 3, 5\]"):
        layer(query, value, attention_mask=mask)
    _assert_no_weights(layer)
    layer(query, value)  # built now; a bad mask is still caught at call time
    with pytest.raises(ValueError, match=r"`attention_mask`"):
        layer(query, value, attention_mask=mask)


def test_attention_mask_shape_is_checked_in_symbolic_calls():
    layer = _unbuilt()
    with pytest.raises(ValueError, match=r"`attention_mask`.*\[None, 3, 5\]"):
        layer(keras.Input((3, 4)), keras.Input((5, 4)),
              attention_mask=keras.Input((5, 3), dtype="bool"))
    _assert_no_weights(layer)


def test_broadcastable_masks_are_accepted():
    query, value = _normal((2, 3, 4), 0), _normal((2, 5, 4), 1)
    layer = _unbuilt()
    for shape in [(2, 3, 5), (1, 3, 5), (2, 1, 5), (3, 5)]:
        assert layer(query, value, attention_mask=np.ones(shape, bool)).shape == (2, 3, 4)


def test_inputs_must_be_rank_3():
    layer = _unbuilt()
    with pytest.raises(ValueError, match=r"`query` must have rank 3"):
        layer(_normal((2, 4), 0), _normal((2, 3, 4), 1))
    _assert_no_weights(layer)

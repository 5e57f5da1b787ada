"""BayesianTransformerBlock: battery, parity with a Keras block, prediction, training."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers.attention.bayesian_layer_normalization import BayesianLayerNormalization
from tfp_bnn.layers.attention.bayesian_multi_head_attention import BayesianMultiHeadAttention
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.predict import MonteCarloRunner
from tfp_bnn.testing.composite_layer_test import run_composite_layer_test
from tests.layers.attention.test_bayesian_multi_head_attention import keras_attention

PARTS = ("query", "key", "value", "output", "norm1", "ffn1", "ffn2", "norm2")


def _normal(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _softplus(x):
    return np.log1p(np.exp(x))


def _sublayers(block):
    attention = block.attention
    return {"query": attention.query_dense, "key": attention.key_dense,
            "value": attention.value_dense, "output": attention.output_dense,
            "norm1": block.norm1, "ffn1": block.ffn1, "ffn2": block.ffn2, "norm2": block.norm2}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_heads": 3, "ff_dim": 6, "dropout": 0.1, "estimator": "flipout",
         "bayesian_bias": True},
    ],
    ids=["flipout_dropout_bayesian_bias"],
)
def test_standard_battery(kwargs):
    # The reparameterization path is what every other test here runs. Every
    # kernel is [6, 6]: each new weight shape costs an XLA compilation.
    run_composite_layer_test(BayesianTransformerBlock, dict(kl_weight=0.01, **kwargs),
                             (3, 4, 6), num_kl_terms=8)


def _random_posterior(block, seed=0):
    rng = np.random.default_rng(seed)
    for sub in _sublayers(block).values():
        for params in (sub.kernel_params, sub.bias_params):
            if params is None:
                continue
            loc, rho = params
            shift = 1.0 if isinstance(sub, BayesianLayerNormalization) and params is \
                sub.kernel_params else 0.0
            loc.assign((shift + 0.5 * rng.normal(size=loc.shape)).astype("float32"))
            rho.assign(np.full(rho.shape, -2.0, "float32"))
        if sub.bias_params is None and sub.use_bias:
            sub.bias.assign(0.3 * rng.normal(size=sub.bias.shape).astype("float32"))


def _means(block):
    return {part: tuple(None if t is None else np.asarray(t) for t in moments[::2])
            for part, moments in block.moment_parameters().items()}


def keras_block(block, weights, x):
    """A deterministic Keras block (MHA + LayerNormalization + Dense) with `weights`.

    `weights[part]` is (kernel, bias) for each part of `PARTS`.
    """
    attention = keras_attention(
        block.attention,
        {f"{name}_dense": weights[name] for name in ("query", "key", "value", "output")},
        x, x)
    width = x.shape[-1]
    norm1 = keras.layers.LayerNormalization(epsilon=block.epsilon)
    norm2 = keras.layers.LayerNormalization(epsilon=block.epsilon)
    ffn1 = keras.layers.Dense(block.ff_dim, activation="relu")
    ffn2 = keras.layers.Dense(width)
    for layer, part, shape in ((norm1, "norm1", x.shape), (norm2, "norm2", x.shape),
                               (ffn1, "ffn1", x.shape), (ffn2, "ffn2", (None, block.ff_dim))):
        layer.build(shape)
        for variable, value in zip(layer.weights, weights[part]):
            variable.assign(value)

    def call(inputs, attention_mask=None, use_causal_mask=False):
        a = attention(inputs, inputs, attention_mask=attention_mask,
                      use_causal_mask=use_causal_mask)
        z = norm1(inputs + a)
        return norm2(z + ffn2(ffn1(z)))

    return call


@pytest.mark.parametrize("case", ["plain", "mask", "causal"])
def test_mean_mode_equals_a_keras_block(case):
    x = _normal((3, 5, 8), 0)
    mask = None
    if case == "mask":
        mask = np.random.default_rng(1).uniform(size=(3, 5, 5)) < 0.6
        mask[:, :, 0] = True
    block = BayesianTransformerBlock(num_heads=2, ff_dim=12, bayesian_bias=case == "mask",
                                     kl_weight=0.0, seed=4)
    block(x)
    _random_posterior(block)
    assert tfp_bnn.set_mean_mode(block) == 8
    ours = block(x, attention_mask=mask, use_causal_mask=case == "causal")
    reference = keras_block(block, _means(block), x)
    expected = reference(x, attention_mask=mask, use_causal_mask=case == "causal")
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(expected)).mean() > 0.1  # not a trivially small output


def test_structure_and_moment_parameters():
    block = BayesianTransformerBlock(num_heads=2, ff_dim=12, kl_weight=0.0, seed=4)
    assert block(_normal((2, 5, 8), 0)).shape == (2, 5, 8)
    assert isinstance(block.attention, BayesianMultiHeadAttention)
    assert block.attention.key_dim == 4 and block.attention.output_dense.units == 8
    assert isinstance(block.norm1, BayesianLayerNormalization)
    assert isinstance(block.ffn1, DenseReparameterization) and block.ffn1.units == 12
    assert block.ffn1.activation is keras.activations.relu and block.ffn2.units == 8
    # Distinct seeds: no two sublayers start from the same rho, and the four
    # glorot-initialised [8, 8] kernels (query, key, value, output) differ.
    rhos = [sub.kernel_params[1].numpy().tobytes() for sub in _sublayers(block).values()]
    assert len(set(rhos)) == len(rhos)
    locs = [_sublayers(block)[p].kernel_params[0].numpy().tobytes() for p in PARTS[:4]]
    assert len(set(locs)) == 4
    _random_posterior(block)
    moments = block.moment_parameters()
    assert tuple(moments) == PARTS
    for part, sub in _sublayers(block).items():
        kernel_loc, kernel_var, bias_loc, bias_var = (np.asarray(t) for t in moments[part])
        np.testing.assert_array_equal(kernel_loc, sub.kernel_params[0].numpy())
        np.testing.assert_allclose(kernel_var, _softplus(sub.kernel_params[1].numpy()) ** 2,
                                   rtol=1e-5)
        if sub.bias_params is None:
            np.testing.assert_array_equal(bias_loc, sub.bias.numpy())
            np.testing.assert_array_equal(bias_var, 0.0)
        else:  # the normalisations' shifts are random
            np.testing.assert_allclose(bias_var, _softplus(sub.bias_params[1].numpy()) ** 2,
                                       rtol=1e-5)
    tfp_bnn.set_mean_mode(block)
    for kernel_loc, kernel_var, bias_loc, bias_var in block.moment_parameters().values():
        np.testing.assert_array_equal(kernel_var, 0.0)


def _model(with_mask, seed=0):
    x = keras.Input((6, 8), name="x")
    inputs = [x]
    mask = None
    if with_mask:
        mask = keras.Input((6, 6), dtype="bool", name="mask")
        inputs.append(mask)
    block = BayesianTransformerBlock(num_heads=2, ff_dim=16, kl_weight=0.0, seed=seed)
    hidden = block(x, attention_mask=mask)
    outputs = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(hidden))
    return keras.Model(inputs if with_mask else x, outputs), block


def test_monte_carlo_sample_s_is_the_block_with_weight_sample_s():
    model, block = _model(with_mask=True)
    _random_posterior(block)
    x = _normal((3, 6, 8), 0)
    mask = np.random.default_rng(1).uniform(size=(3, 6, 6)) < 0.6
    mask[:, :, 0] = True
    runner = MonteCarloRunner(model)
    num_samples = 2
    draws = runner.draw(num_samples)
    by_layer = {id(sub): draw for sub, draw in zip(runner.layers, draws)}
    assert len(by_layer) == 8
    with sample_trace(num_samples, by_layer):
        tiled = np.tile(x, (num_samples, 1, 1))
        hidden = np.asarray(block(tiled, attention_mask=np.tile(mask, (num_samples, 1, 1))))
    hidden = hidden.reshape((num_samples,) + x.shape)
    for s in range(num_samples):
        weights = {}
        for part, sub in _sublayers(block).items():
            kernels, biases = by_layer[id(sub)]
            bias = sub.bias.numpy() if biases is None else np.asarray(biases[s])
            weights[part] = (np.asarray(kernels[s]), bias)
        expected = keras_block(block, weights, x)(x, attention_mask=mask)
        np.testing.assert_allclose(hidden[s], expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(hidden[0], hidden[1])


@pytest.mark.parametrize("with_mask", [False, True], ids=["no_mask", "mask"])
def test_predict_sample(with_mask):
    model, _ = _model(with_mask)
    x = _normal((5, 6, 8), 0)
    inputs = [x, np.tril(np.ones((6, 6), bool))[None].repeat(5, 0)] if with_mask else x
    samples = tfp_bnn.predict.sample(model, inputs, num_samples=4)
    assert samples.shape == (4, 5, 1)
    assert np.all(np.std(samples, axis=0) > 0)
    assert tfp_bnn.set_mean_mode(model) == 8
    samples = tfp_bnn.predict.sample(model, inputs, num_samples=4)
    np.testing.assert_allclose(samples, np.broadcast_to(model(inputs), samples.shape),
                               rtol=1e-5, atol=1e-6)


def test_fit_decreases_the_loss_on_a_toy_sequence_regression():
    # y = mean over positions of feature 0 times the last position's feature
    # 1: the target mixes positions. From this seed the data loss (loss - KL)
    # falls from 2.0 in epoch 1 to 0.085 over the last three of 20 epochs
    # (seeds 1, 2, 3 give ratios 0.043, 0.031, 0.062); a model that does not
    # learn stays near its first-epoch loss, so a quarter of it is a wide
    # margin. The last three epochs are averaged: each is one noisy step.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6, 8)).astype("float32")
    y = (x[:, :, 0].mean(1) * x[:, -1, 1])[:, None].astype("float32")
    keras.utils.set_random_seed(1)
    inputs = keras.Input((6, 8))
    block = BayesianTransformerBlock(num_heads=2, ff_dim=16, seed=1)
    hidden = keras.layers.Flatten()(block(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    scheduler = KLScheduler(num_examples=32)
    history = model.fit(x, y, epochs=20, batch_size=32, verbose=0, callbacks=[scheduler])
    assert len(scheduler._layers) == 8
    assert block.norm2.kl_weight.numpy() == pytest.approx(1 / 32)
    data_loss = history.history["data_loss"]
    assert np.mean(data_loss[-3:]) < 0.25 * data_loss[0], data_loss


# -- bad input ------------------------------------------------------------------

@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"num_heads": 0, "ff_dim": 4}, r"`num_heads`.*0"),
        ({"num_heads": 2, "ff_dim": 0}, r"`ff_dim`.*0"),
        ({"num_heads": 2, "ff_dim": 2.5}, r"`ff_dim`.*2.5"),
        ({"num_heads": 2, "ff_dim": 4, "key_dim": 0}, r"`key_dim`.*0"),
        ({"num_heads": 2, "ff_dim": 4, "value_dim": -2}, r"`value_dim`.*-2"),
        ({"num_heads": 2, "ff_dim": 4, "dropout": 1.5}, r"`dropout`.*1.5"),
        ({"num_heads": 2, "ff_dim": 4, "epsilon": -1e-3}, r"`epsilon`"),
        ({"num_heads": 2, "ff_dim": 4, "estimator": "local_reparameterization"},
         r"`estimator`.*'local_reparameterization'"),
        ({"num_heads": 2, "ff_dim": 4, "kl_estimator": "exact"}, r"`kl_estimator`"),
        ({"num_heads": 2, "ff_dim": 4, "seed": 1.5}, r"`seed`"),
    ],
)
def test_constructor_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        BayesianTransformerBlock(**kwargs)


def _assert_unbuilt(block):
    assert not block.built and block.attention is None and not block.weights


@pytest.mark.parametrize("shape", [(2, 8), (2, 3, 4, 8)])
def test_inputs_must_be_rank_3(shape):
    block = BayesianTransformerBlock(num_heads=2, ff_dim=4)
    with pytest.raises(ValueError, match=r"`inputs` must have rank 3"):
        block(_normal(shape, 0))
    _assert_unbuilt(block)


def test_width_must_divide_by_num_heads_without_key_dim():
    block = BayesianTransformerBlock(num_heads=3, ff_dim=4)
    with pytest.raises(ValueError, match=r"width \(8\).*`num_heads` \(3\)"):
        block(keras.Input((5, 8)))
    _assert_unbuilt(block)
    block = BayesianTransformerBlock(num_heads=3, ff_dim=4, key_dim=2, kl_weight=0.0)
    assert block(_normal((2, 5, 8), 0)).shape == (2, 5, 8)


@pytest.mark.parametrize("mask_shape", [(2, 5, 4), (4, 5), (2, 5, 5, 1)])
def test_attention_mask_must_broadcast(mask_shape):
    block = BayesianTransformerBlock(num_heads=2, ff_dim=4)
    with pytest.raises(ValueError, match=r"`attention_mask` must broadcast to .*\[2, 5, 5\]"):
        block(_normal((2, 5, 8), 0), attention_mask=np.ones(mask_shape, bool))
    _assert_unbuilt(block)

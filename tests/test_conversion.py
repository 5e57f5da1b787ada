"""bayesianize: trained Keras models to variational ones with MOPED priors.

The models are tiny and random-weighted (biases too, so the bias path is
checked); each is converted once in a module fixture.
"""

import importlib

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import layers as bnn_layers
from tfp_bnn.conversion import bayesianize
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.priors import CenteredNormalPrior

RNG = np.random.default_rng(0)
# Mean-mode outputs repeat the original arithmetic with the same float32
# weights; only the order of operations may differ (Flipout adds a zero
# perturbation, conv kernels may run through another path): a few float32 ulps
# of outputs of order 1.
ATOL = 1e-5


def _randomize(model, seed):
    """Random kernels and nonzero biases, as a trained model has (one bias entry 0)."""
    rng = np.random.default_rng(seed)
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D,
                              keras.layers.Conv3D)):
            layer.kernel.assign(rng.normal(0.0, 0.5, layer.kernel.shape))
            bias = rng.normal(0.0, 0.5, layer.bias.shape)
            bias[0] = 0.0  # a trained weight of exactly 0: the scale floor keeps the KL finite
            layer.bias.assign(bias)
        elif isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(size=layer.moving_mean.shape))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, layer.moving_variance.shape))
    return model


# Every converted layer is 4 wide, so that the layers share a few weight
# shapes: the posterior draw is XLA-compiled once per shape.
def _cnn():
    return _randomize(keras.Sequential([
        keras.Input((5, 5, 2)),
        keras.layers.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="conv"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4, name="logits"),
    ], name="cnn"), 1)


def _shared():
    inputs = keras.Input((4,))
    shared = keras.layers.Dense(4, activation="tanh", name="shared")
    outputs = keras.layers.Dense(4, name="head")(shared(shared(inputs)))
    return _randomize(keras.Model(inputs, outputs, name="shared_model"), 2)


def _nested():
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.BatchNormalization(name="bn")], name="inner")
    inputs = keras.Input((4,))
    return _randomize(keras.Model(inputs, keras.layers.Dense(4, name="out")(inner(inputs)),
                                  name="nested"), 3)


def _masked():
    return _randomize(keras.Sequential([
        keras.Input((None, 4)), keras.layers.Masking(0.0),
        keras.layers.Dense(4, activation="relu", name="step"),
        keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4, name="out"),
    ], name="masked"), 4)


def _convs_1d_3d():
    inputs = keras.Input((8, 2))
    a = keras.layers.Conv1D(4, 2, dilation_rate=2, padding="causal", name="c1")(inputs)
    volume = keras.Input((3, 3, 3, 1))
    b = keras.layers.Conv3D(4, 2, name="c3")(volume)
    outputs = keras.layers.Concatenate()([keras.layers.Flatten()(a), keras.layers.Flatten()(b)])
    return _randomize(keras.Model([inputs, volume], outputs, name="convs"), 5)


def _embedded():
    return _randomize(keras.Sequential([
        keras.Input((None,), dtype="int32"), keras.layers.Embedding(10, 4, mask_zero=True),
        keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2, name="out"),
    ], name="embedded"), 6)


X_CNN = RNG.normal(size=(4, 5, 5, 2)).astype("float32")
X_VEC = RNG.normal(size=(6, 4)).astype("float32")
X_SEQ = RNG.normal(size=(2, 4, 4)).astype("float32")
X_SEQ[:, 2:] = 0.0  # the last two steps are padding
X_TOKENS = np.array([[3, 7, 0, 0], [9, 1, 4, 0]], "int32")  # 0 pads
X_CONVS = [RNG.normal(size=(2, 8, 2)).astype("float32"),
           RNG.normal(size=(2, 3, 3, 3, 1)).astype("float32")]

CASES = {
    "cnn": (_cnn, X_CNN, "flipout"),
    "shared": (_shared, X_VEC, "reparameterization"),
    "nested": (_nested, X_VEC, "flipout"),
    "masked": (_masked, X_SEQ, "reparameterization"),
    "convs": (_convs_1d_3d, X_CONVS, "flipout"),
    "embedded": (_embedded, X_TOKENS, "reparameterization"),
}


@pytest.fixture(scope="module")
def converted():
    """name -> (original, its weights before conversion, converted model, inputs)."""
    keras.utils.set_random_seed(1)
    out = {}
    for name, (build, x, method) in CASES.items():
        model = build()
        before = [w.copy() for w in model.get_weights()]
        out[name] = (model, before, bayesianize(model, method=method, delta=0.1, seed=7), x)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_mean_mode_reproduces_the_original(converted, name):
    model, _, bnn, x = converted[name]
    assert tfp_bnn.set_mean_mode(bnn) > 0
    np.testing.assert_allclose(bnn(x, training=False), model(x, training=False), atol=ATOL)
    tfp_bnn.set_mean_mode(bnn, False)
    # Sampling moves the outputs: the converted layers are really random.
    assert np.abs(np.asarray(bnn(x, training=False)) - np.asarray(model(x))).max() > 1e-4


def test_the_mask_passes_through_converted_layers(converted):
    # With the mask, padded steps do not enter the average: the trimmed
    # sequence gives the same output. Without it they would (zeros through relu(Wx + b)).
    model, _, bnn, x = converted["masked"]
    tfp_bnn.set_mean_mode(bnn)
    np.testing.assert_allclose(bnn(x[:, :2]), model(x), atol=ATOL)
    unmasked = keras.Sequential(model.layers[1:])  # without the Masking layer
    assert np.abs(np.asarray(unmasked(x)) - np.asarray(model(x))).max() > 1e-3
    tfp_bnn.set_mean_mode(bnn, False)


def test_a_converted_embedding_keeps_its_mask(converted):
    model, _, bnn, x = converted["embedded"]
    assert type(bnn.layers[0]).__name__ == "EmbeddingReparameterization"
    tfp_bnn.set_mean_mode(bnn)
    # Padding (token 0) does not enter the average: one more pad changes nothing.
    padded = np.concatenate([x, np.zeros((2, 1), "int32")], axis=1)
    np.testing.assert_allclose(bnn(padded), model(x), atol=ATOL)
    tfp_bnn.set_mean_mode(bnn, False)


def test_the_input_model_is_untouched_and_other_layers_keep_their_weights(converted):
    for model, before, bnn, _ in converted.values():
        for old, new in zip(before, model.get_weights()):
            np.testing.assert_array_equal(old, new)
        assert not tfp_bnn.bayesian_layers(model)
    model, _, bnn, _ = converted["nested"]
    old_bn = model.get_layer("inner").get_layer("bn")
    new_bn = bnn.get_layer("inner").get_layer("bn")
    assert new_bn is not old_bn
    for old, new in zip(old_bn.get_weights(), new_bn.get_weights()):
        np.testing.assert_array_equal(old, new)


def test_carried_arguments_and_the_chosen_estimator(converted):
    conv = converted["cnn"][2].get_layer("conv")
    assert isinstance(conv, bnn_layers.Conv2DFlipout)
    assert (conv.filters, conv.kernel_size, conv.strides, conv.padding) == (4, (3, 3), (2, 2),
                                                                              "same")
    assert conv.activation is keras.activations.relu and conv.use_bias
    c1 = converted["convs"][2].get_layer("c1")
    assert (c1.dilation_rate, c1.padding) == ((2,), "causal")
    assert isinstance(converted["shared"][2].get_layer("head"), bnn_layers.DenseReparameterization)


def test_a_shared_layer_stays_one_shared_layer(converted):
    bnn = converted["shared"][2]
    variational = tfp_bnn.bayesian_layers(bnn)
    assert [layer.name for layer in variational] == ["shared", "head"]
    assert len(bnn.get_layer("shared")._inbound_nodes) == 2


def test_moped_scale_prior_centre_and_kl_at_init(converted):
    model, _, bnn, _ = converted["cnn"]
    old, new = model.get_layer("conv"), bnn.get_layer("conv")
    for w, params, prior in ((old.kernel, new.kernel_params, new._kernel_prior_built),
                             (old.bias, new.bias_params, new._bias_prior_built)):
        w = np.asarray(w)
        loc, scale = (np.asarray(t) for t in new.posterior.prepare(params))
        np.testing.assert_array_equal(loc, w)
        np.testing.assert_array_equal(np.asarray(prior.loc), w)
        nonzero = w != 0
        # softplus(softplus^-1(s)) in float32: a few ulps relative.
        np.testing.assert_allclose(scale[nonzero], 0.1 * np.abs(w[nonzero]), rtol=1e-5)
        np.testing.assert_allclose(scale[~nonzero], 1e-20, rtol=1e-3)
    # KL(N(w, s^2) || N(w, 1)) = sum(-log s + s^2 / 2 - 1/2) in closed form.
    scales = np.concatenate([np.asarray(new.posterior.prepare(p)[1], np.float64).ravel()
                             for p in (new.kernel_params, new.bias_params)])
    expected = np.sum(-np.log(scales) + scales ** 2 / 2 - 0.5)
    kl = float(new.kl_divergence())
    assert np.isfinite(kl)
    np.testing.assert_allclose(kl, expected, rtol=1e-5)


def test_layer_selection_by_count_name_and_class():
    model = _nested()
    last = bayesianize(model, layers=1)
    assert [layer.name for layer in tfp_bnn.bayesian_layers(last)] == ["out"]
    dense_name = model.get_layer("inner").layers[0].name
    named = bayesianize(model, layers=[dense_name])
    assert [layer.name for layer in tfp_bnn.bayesian_layers(named)] == [dense_name]
    # A model with variational layers converts again: those are copied as they are.
    twice = bayesianize(last, layers=[dense_name])
    assert [layer.name for layer in tfp_bnn.bayesian_layers(twice)] == [dense_name, "out"]
    tfp_bnn.set_mean_mode(twice)
    np.testing.assert_allclose(twice(X_VEC, training=False), model(X_VEC, training=False),
                               atol=ATOL)
    cnn = bayesianize(_cnn(), layers=[keras.layers.Conv2D])
    assert [layer.name for layer in tfp_bnn.bayesian_layers(cnn)] == ["conv"]


def test_fit_with_kl_scheduler_lowers_the_loss_then_saves_and_exports(tmp_path):
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 4))).astype("float32")
    bnn = bayesianize(_shared(), method="flipout", seed=0)
    # Eager steps: for four steps of a tiny model, cheaper than tracing one.
    bnn.compile(keras.optimizers.Adam(0.1), "mse", run_eagerly=True)
    history = bnn.fit(x, y, batch_size=64, epochs=4, verbose=0,
                      callbacks=[KLScheduler(num_examples=len(x))])
    logs = history.history
    assert logs["kl_weight"] == [1 / 64] * 4  # KLScheduler set 1/N
    # The targets are not what the random weights fit. Three Adam steps of 0.1
    # lower the data loss by ~35% (3.39 -> 2.20 with these seeds). The weight
    # noise moves one batch's data loss by 0.7% (std of 30 draws at the
    # start: 0.024 on 3.40), so a 10% decrease is > 10 noise std: learning.
    assert logs["data_loss"][-1] < 0.9 * logs["data_loss"][0], logs
    assert logs["loss"][-1] < logs["loss"][0], logs
    path = str(tmp_path / "bnn.keras")
    bnn.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    tfp_bnn.set_mean_mode(bnn)
    tfp_bnn.set_mean_mode(loaded)
    np.testing.assert_allclose(loaded(x[:8]), bnn(x[:8]), atol=1e-6)
    prior = loaded.get_layer("head")._kernel_prior_built
    assert isinstance(prior, CenteredNormalPrior)
    np.testing.assert_array_equal(prior.loc, bnn.get_layer("head")._kernel_prior_built.loc)
    # Export smoke check: the SavedModel is written (tests/test_export.py
    # serves exported models in a process without tfp_bnn).
    exported = tfp_bnn.export.export_saved_model(bnn, str(tmp_path / "served"))
    assert (tmp_path / "served" / "saved_model.pb").is_file() and exported.endswith("served")


class _MyDense(keras.layers.Dense):
    pass


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(2)

    def call(self, inputs):
        return self.dense(inputs)


def _lora_model():
    model = _nested()
    model.get_layer("out").enable_lora(2)
    return model


def _custom_dense_model():
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(1)(_MyDense(2, name="mine")(inputs)))


@pytest.mark.parametrize("make, kwargs, message", [
    (_nested, {"method": "bayes"}, "`method` must be one of"),
    (_nested, {"delta": 0.0}, "`delta` must be"),
    (_nested, {"delta": float("nan")}, "`delta` must be"),
    (_nested, {"prior_scale": -1.0}, "`prior_scale` must be"),
    (_nested, {"kl_weight": -0.1}, "`kl_weight` must be"),
    (_nested, {"seed": -1}, "`seed` must be"),
    (_nested, {"layers": 0}, "`layers` must be a positive int"),
    (_nested, {"layers": 3}, "asks for the last 3 convertible layers but model 'nested' has 2"),
    (_nested, {"layers": 1.5}, "`layers` must be 'all', an int k"),
    (_nested, {"layers": ["nope"]}, r"`layers` must be some of .*got \['nope'\]"),
    (_nested, {"layers": ["bn"]}, r"layer 'bn' \(BatchNormalization\) cannot be converted"),
    (_nested, {"layers": [keras.layers.LSTM]}, "lists the class LSTM, which bayesianize cannot"),
    (_nested, {"layers": [keras.layers.Conv2D]}, "selects no layer of model 'nested'"),
    (_custom_dense_model, {"layers": ["mine"]}, r"'mine' \(_MyDense\) cannot be converted.*"
                                                "not subclasses"),
    (_lora_model, {"layers": ["out"]}, "layer 'out' has lora_rank=2; bayesianize converts plain"),
    (lambda: keras.Sequential([keras.Input((3,)), keras.layers.BatchNormalization()],
                              name="bn_only"), {}, "model 'bn_only' has no layer bayesianize"),
    (_Subclassed, {}, "a subclassed model cannot be rewired.*got _Subclassed"),
])
def test_bad_arguments_give_one_line_errors(make, kwargs, message):
    model = make()
    if not model.built:
        model(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match=message) as info:
        bayesianize(model, **kwargs)
    assert "\n" not in str(info.value)


def test_an_unbuilt_model_and_an_unbuilt_prior_are_refused():
    with pytest.raises(ValueError, match="is not built"):
        bayesianize(keras.Sequential([keras.layers.Dense(2)], name="lazy"))
    with pytest.raises(ValueError, match="no centre yet"):
        CenteredNormalPrior(2.0).element_distribution()


def test_a_table_entry_without_a_counterpart_for_the_method_is_refused(monkeypatch):
    module = importlib.import_module("tfp_bnn.conversion")
    table = dict(module.CONVERSIONS)
    table[keras.layers.Dense] = table[keras.layers.Dense]._replace(flipout=None)
    monkeypatch.setattr(module, "CONVERSIONS", table)
    with pytest.raises(ValueError, match=r"layer 'out' \(Dense\) has no flipout counterpart"):
        bayesianize(_nested(), layers=1, method="flipout")

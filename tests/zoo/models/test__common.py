"""What every ready model shares (`zoo.models._common`): builds, trains, saves, seeds, checks.

The family-specific structure is tested in test_bbb.py, test_flipout.py, test_mc_dropout.py,
test_node_bnn.py and test_transformer.py.
"""

import functools
import math
import os

import keras
import numpy as np
import pytest

import tfp_bnn
import zoo
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import HomoscedasticNoise
from tfp_bnn.layers import NodeDense
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import MomentGaussianNLL
from zoo.models import _common
from zoo.models import digits
from zoo.models import flipout
from zoo.models import node_bnn
from zoo.models.dvi import DVIGaussianNLL

SHAPES = {"table": (8,), "image": (8, 8, 1), "sequence": (24, 1)}
NUM_CLASSES = 3
BATCH = 16
CASES = [(name, task, kind) for name in zoo.list_models()
         for task in zoo.get_spec(name).tasks for kind in zoo.get_spec(name).inputs]
# One input kind per (model, task) for the costlier checks.
MODEL_TASKS = [(name, task, zoo.get_spec(name).inputs[0]) for name in zoo.list_models()
               for task in zoo.get_spec(name).tasks]
MLP_FAMILIES = ["bbb_mlp", "flipout_mlp", "mc_dropout_mlp"]
KL_NUM_TRAIN = 927  # the shared builds' N: not BATCH, the N of the training tests' KLScheduler


def _id(case):
    return "-".join(case)


def _build(name, task="regression", kind="table", num_train=BATCH, seed=0, **overrides):
    num_classes = NUM_CLASSES if task == "classification" else None
    return zoo.build_model(name, SHAPES[kind], task=task, num_classes=num_classes,
                           num_train=num_train, seed=seed, **overrides)


def _data(task, kind, n=BATCH, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *SHAPES[kind])).astype("float32")
    if task == "classification":
        return x, rng.integers(0, NUM_CLASSES, size=n).astype("int32")
    return x, rng.normal(size=n).astype("float32")


def _kl_layers(model):
    return [layer for layer in tfp_bnn.bayesian_layers(model) if hasattr(layer, "kl_weight")]


def _fit_one_step(model, x, y):
    # KLScheduler only where a layer carries a KL (MC dropout has none).
    callbacks = [KLScheduler(len(x))] if _kl_layers(model) else []
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(x, y, batch_size=len(x), epochs=1, verbose=0, shuffle=False,
                        callbacks=callbacks)
    assert np.isfinite(history.history["loss"][0])
    unchanged = [v.path for old, v in zip(before, model.trainable_variables)
                 if np.array_equal(old, v.numpy())]
    assert not unchanged, f"one step left {unchanged} unchanged"


def _member_axis(name):
    """A deep ensemble's outputs have a member axis (M = 5) before the last one."""
    return (5,) if name == "deep_ensemble" else ()


def _call(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


class _Builds:
    """Each (model, task, input kind) built once for the tests of this module.

    `look(*case)` lends the model to a test that only reads it; `take(*case)`
    hands it over to one that trains or switches it (and so is the last to
    see it): the next test to ask gets a fresh build. A test run on its own
    builds its own, so no test depends on another having run; run in file
    order, the output and KL checks and a one-step training share one build.
    """

    def __init__(self):
        self._models = {}

    def look(self, name, task="regression", kind="table"):
        key = (name, task, kind)
        if key not in self._models:
            self._models[key] = _build(name, task, kind, num_train=KL_NUM_TRAIN)
        return self._models[key]

    def take(self, name, task="regression", kind="table"):
        model = self.look(name, task, kind)
        del self._models[(name, task, kind)]
        return model


@pytest.fixture(scope="module")
def builds():
    return _Builds()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_builds_for_each_task_and_input_with_its_output_and_loss(case, builds):
    name, task, kind = case
    model = builds.look(name, task, kind)
    width = NUM_CLASSES if task == "classification" else 2
    if name in ("bayesian_transformer", "dvi_mlp"):  # subclassed: shapes from a call
        x, _ = _data(task, kind, n=3)
        assert _call(model, x).shape == (3, width)
    else:
        assert model.input_shape == (None, *SHAPES[kind])
        assert model.output_shape == (None, *_member_axis(name), width)
    # A deep ensemble sums its members' losses (tfp_bnn.ensembles.MemberLoss).
    loss = model.loss.loss if name == "deep_ensemble" else model.loss
    if task == "classification":
        assert isinstance(loss, keras.losses.SparseCategoricalCrossentropy)
        assert loss.get_config()["from_logits"] is True
        [metric] = model.get_compile_config()["metrics"]
        assert (metric["class_name"], metric["config"]["name"]) == (
            "MixtureAccuracy" if name == "deep_ensemble" else "SparseCategoricalAccuracy",
            "accuracy")
        assert model.optimizer.built  # slots made before fit: its step is traced once
    elif name == "bayesian_transformer":
        assert isinstance(model.loss, MomentGaussianNLL)
        assert model.loss.mode == "diagonal"
    elif name == "dvi_mlp":  # scored on the propagated moments (DVIRegressor.compute_loss)
        assert isinstance(model.loss, DVIGaussianNLL)
    else:
        assert isinstance(loss, GaussianNLL)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(
        3e-3 if name == "bayesian_transformer" else _common.LEARNING_RATE)


@pytest.mark.parametrize("case", MODEL_TASKS, ids=_id)
def test_kl_weight_is_one_over_num_train(case, builds):
    name, task, kind = case
    model = builds.look(name, task, kind)
    layers = _kl_layers(model)
    if name.startswith("mc_dropout") or name == "deep_ensemble":
        assert layers == []
        return
    assert len(layers) == len(tfp_bnn.bayesian_layers(model)) >= 2
    for layer in layers:
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / KL_NUM_TRAIN, rel=1e-6), \
            layer.name


# Every (model, task) on its first input kind; the transformer on both, as its
# pooling depends on the layout.
TRAIN_CASES = MODEL_TASKS + [("bayesian_transformer", "regression", "sequence")]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=_id)
def test_trains_one_step_then_round_trips_through_a_keras_file(case, tmp_path, builds):
    name, task, kind = case
    model = builds.take(name, task, kind)
    x, y = _data(task, kind, seed=1)
    # Eagerly: tracing the compiled step would take most of this test's time.
    # The compiled step runs in test_learns_a_sine.
    model.run_eagerly = True
    _fit_one_step(model, x, y)
    stochastic = tfp_bnn.bayesian_layers(model)
    assert tfp_bnn.set_mean_mode(model) == len(stochastic)
    assert stochastic or name == "deep_ensemble"  # its default members are plain MLPs
    expected = _call(model, x)
    assert expected.shape == (BATCH, *_member_axis(name),
                              NUM_CLASSES if task == "classification" else 2)
    # Mean mode must be deterministic, or the comparison below proves nothing.
    np.testing.assert_array_equal(_call(model, x), expected)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert tfp_bnn.is_mean_mode(loaded) == bool(stochastic)
    assert type(loaded.loss) is type(model.loss)
    assert len(loaded.weights) == len(model.weights)
    for old, new in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(new.numpy(), old.numpy(), err_msg=old.path)
    np.testing.assert_array_equal(_call(loaded, x), expected)


@pytest.mark.parametrize("name", zoo.list_models())
def test_seed_fixes_the_initial_weights_and_the_first_sample(name):
    spec = zoo.get_spec(name)
    task, kind = spec.tasks[0], spec.inputs[0]
    x, _ = _data(task, kind)
    a = _build(name, task, kind, seed=3)
    first_a = _call(a, x)
    # A different global state: nothing may depend on it but the seed.
    keras.utils.set_random_seed(99)
    b = _build(name, task, kind, seed=3)
    for va, vb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(va.numpy(), vb.numpy(), err_msg=va.path)
    np.testing.assert_array_equal(_call(b, x), first_a)
    c = _build(name, task, kind, seed=4)
    # Not constant and not only zeros and ones (the LSTM's bias: ones at the forget gate).
    randomly_initialised = [(va, vc) for va, vc in zip(a.trainable_weights, c.trainable_weights)
                            if np.ptp(va.numpy()) > 0 and not np.isin(va.numpy(), (0, 1)).all()]
    assert randomly_initialised
    for va, vc in randomly_initialised:
        assert not np.array_equal(va.numpy(), vc.numpy()), f"{va.path} ignores the seed"


def _units(model, kinds):
    return [layer.units for layer in model.layers if isinstance(layer, kinds)]


@pytest.mark.parametrize("family, cls", [("bbb_mlp", DenseReparameterization),
                                         ("flipout_mlp", DenseFlipout),
                                         ("mc_dropout_mlp", keras.layers.Dense),
                                         ("node_bnn", NodeDense)])
@pytest.mark.parametrize("task", ["regression", "classification"])
def test_mlp_widths_follow_the_protocol(family, cls, task, builds):
    head = [NUM_CLASSES] if task == "classification" else [1]
    hidden = list(_common.REGRESSION_UNITS if task == "regression"
                  else _common.CLASSIFICATION_UNITS)
    assert hidden == ([50] if task == "regression" else [128, 128])
    model = builds.look(family, task, "image")
    assert _units(model, cls) == hidden + head
    activations = [layer.activation.__name__ for layer in model.layers if isinstance(layer, cls)]
    assert activations == ["relu"] * len(hidden) + ["linear"]
    assert isinstance(model.get_layer("flatten"), keras.layers.Flatten)


@pytest.mark.parametrize("family", MLP_FAMILIES)
def test_plain_models_end_in_homoscedastic_noise_heteroscedastic_in_two_units(family):
    plain = _build(family)
    noise = plain.layers[-1]
    assert isinstance(noise, HomoscedasticNoise)
    mean_layer = plain.get_layer("mean")
    assert noise.input is mean_layer.output and mean_layer.units == 1
    hetero = _build(family + "_heteroscedastic")
    assert not [layer for layer in hetero.layers if isinstance(layer, HomoscedasticNoise)]
    head = hetero.layers[-1]
    assert head.units == 2 and head.output is hetero.output
    # The heteroscedastic s depends on x, the plain one does not.
    tfp_bnn.set_mean_mode(plain)
    tfp_bnn.set_mean_mode(hetero)
    x, _ = _data("regression", "table")
    assert np.ptp(_call(plain, x)[:, 1]) == 0
    assert np.ptp(_call(hetero, x)[:, 1]) > 0


# --- argument errors -------------------------------------------------------------------

def _check_every_model_names(argument, value):
    """Every registered model, built on its first task and input, refuses `value`."""
    for name in zoo.list_models():
        spec = zoo.get_spec(name)
        task = spec.tasks[0]
        kwargs = {"input_shape": SHAPES[spec.inputs[0]], "task": task, "num_train": 10,
                  "num_classes": NUM_CLASSES if task == "classification" else None,
                  argument: value}
        with pytest.raises(ValueError, match=argument) as info:
            zoo.build_model(name, **kwargs)
        shown = (value,) if argument != "input_shape" or not hasattr(value, "__iter__") else (
            value, tuple(value))
        assert any(repr(v) in str(info.value) for v in shown), name


@pytest.mark.parametrize("argument, value", [
    *[("input_shape", v) for v in [(), (0,), (-3,), (8.0,), (True,), (8, None), None, 8, "8"]],
    *[("num_train", v) for v in [None, 0, -5, 2.5, True, "100"]],
    *[("seed", v) for v in [-1, 1.5, True, None, "0"]]])
def test_bad_common_argument_is_named(argument, value):
    _check_every_model_names(argument, value)


@pytest.mark.parametrize("task, num_classes", [("classification", None),
                                               ("classification", 1),
                                               ("classification", 3.0),
                                               ("classification", True),
                                               ("regression", 3)])
def test_bad_num_classes_is_named(task, num_classes):
    names = [n for n in zoo.list_models() if task in zoo.get_spec(n).tasks]
    assert len(names) >= 5
    for name in names:
        shape = SHAPES[zoo.get_spec(name).inputs[0]]
        with pytest.raises(ValueError, match="num_classes") as info:
            zoo.build_model(name, shape, task=task, num_classes=num_classes, num_train=10)
        assert repr(num_classes) in str(info.value), name


@pytest.mark.parametrize("name, overrides, argument", [
    ("flipout_mlp", {"hidden_units": (50, 0)}, "hidden_units"),
    ("flipout_mlp", {"hidden_units": 50}, "hidden_units"),
    ("flipout_lenet", {"filters": (6, 1.5)}, "filters"),
    ("flipout_lenet", {"filters": 6}, "filters"),
    ("bbb_mlp", {"learning_rate": 0.0}, "learning_rate"),
    ("bbb_mlp", {"learning_rate": float("nan")}, "learning_rate"),
    ("bbb_mlp", {"learning_rate": None}, "learning_rate"),
    ("bbb_mlp", {"learning_rate": "fast"}, "learning_rate"),
    ("bbb_mlp", {"learning_rate": True}, "learning_rate"),
    ("node_bnn", {"decay_steps": 0}, "decay_steps"),
    ("mc_dropout_mlp", {"rate": 1.0}, "rate"),
    ("mc_dropout_mlp", {"length_scale": 0.0}, "length_scale"),
    ("bayesian_transformer", {"mode": "full"}, "mode"),
], ids=lambda value: str(value) if not isinstance(value, dict) else "-".join(
    f"{k}={v!r}" for k, v in value.items()))
def test_bad_overrides_raise_value_error_naming_them(name, overrides, argument):
    task = "classification" if name == "flipout_lenet" else "regression"
    kind = "image" if name == "flipout_lenet" else "table"
    # Backquoted, as every message of the package names an argument (or one of its items).
    with pytest.raises(ValueError, match=rf"`{argument}(\[\d+\])?`|{argument}="):
        _build(name, task, kind, **overrides)


def test_numpy_integers_are_accepted():
    model = zoo.build_model("mc_dropout_mlp", np.array([8]), num_train=np.int64(100),
                            seed=np.int64(1))
    assert model.input_shape == (None, 8)


def test_decay_steps_turns_on_a_cosine_decay_to_a_tenth():
    model = _build("bbb_mlp", decay_steps=100, learning_rate=0.02)
    config = model.optimizer.get_config()["learning_rate"]
    decay = keras.optimizers.schedules.deserialize(config)
    assert isinstance(decay, keras.optimizers.schedules.CosineDecay)
    assert float(decay(0)) == pytest.approx(0.02)
    assert float(decay(100)) == pytest.approx(0.002)
    assert float(decay(1000)) == pytest.approx(0.002)
    constant = _build("bbb_mlp", learning_rate=0.02)
    assert constant.optimizer.get_config()["learning_rate"] == pytest.approx(0.02)


IMAGE_BUILDERS = {
    "deterministic_cnn": digits.deterministic_cnn,
    "flipout_cnn": digits.flipout_cnn,
    "node_bnn_cnn": node_bnn.node_bnn_cnn_gaussian,
    "flipout_lenet": flipout.flipout_lenet,
    "flipout_mlp": flipout.flipout_mlp,  # Flatten alone
}


@pytest.mark.parametrize("name", IMAGE_BUILDERS)
def test_images_are_height_width_channels_whatever_keras_image_data_format(name):
    # The convolutions, poolings and Flatten of a model built with Keras' image data format
    # set to channels_first still read [height, width, channels]: the same weights, the same
    # first sample. Left to the global setting, the kernels would take the height as the
    # channels, and a CPU without oneDNN has no channels_first max pooling.
    build = functools.partial(IMAGE_BUILDERS[name], (9, 8, 2), task="classification",
                              num_classes=NUM_CLASSES, num_train=BATCH, seed=0)
    x = np.random.default_rng(0).normal(size=(4, 9, 8, 2)).astype("float32")
    reference = build()
    expected = _call(reference, x)
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        model = build()
    finally:
        keras.config.set_image_data_format(previous)
    for old, new in zip(reference.weights, model.weights, strict=True):
        np.testing.assert_array_equal(new.numpy(), old.numpy(), err_msg=old.path)
    np.testing.assert_array_equal(_call(model, x), expected)


# --- learning -----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", ["mc_dropout_mlp", "flipout_mlp"])
def test_learns_a_sine(name):
    """y = sin(x) + N(0, 0.1^2), x ~ U(-3, 3), n = 256.

    The target's s.d. is ~0.69, the best training RMSE ~ sigma = 0.1 (up to
    sigma / sqrt(2n) ~ 0.004 of sampling error); the best straight line
    reaches ~0.45. After 400 Adam steps (lr 1e-2, batch 64) the mean-mode
    fit must be within 2 sigma, i.e. have learned the curve, and the learned
    noise variance must be below the target's variance (it starts at 1).
    """
    n, sigma, steps, batch = 256, 0.1, 400, 64
    rng = np.random.default_rng(0)
    x = rng.uniform(-3.0, 3.0, size=(n, 1)).astype("float32")
    y = (np.sin(x[:, 0]) + sigma * rng.normal(size=n)).astype("float32")
    model = zoo.build_model(name, (1,), num_train=n, seed=0, learning_rate=1e-2)
    callbacks = [KLScheduler(n)] if _kl_layers(model) else []
    # All steps in one epoch: Keras's per-epoch overhead dominates otherwise.
    repeats = steps * batch // n
    model.fit(np.tile(x, (repeats, 1)), np.tile(y, repeats), batch_size=batch, epochs=1,
              shuffle=False, verbose=0, callbacks=callbacks)
    tfp_bnn.set_mean_mode(model)
    out = _call(model, x)
    rmse = float(np.sqrt(np.mean((out[:, 0] - y) ** 2)))
    line = np.polyval(np.polyfit(x[:, 0], y, 1), x[:, 0])
    assert float(np.sqrt(np.mean((line - y) ** 2))) > 4 * sigma  # the bar is not trivial
    assert rmse < 2 * sigma, rmse
    assert math.exp(float(out[0, 1])) < float(np.var(y))

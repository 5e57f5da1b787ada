"""A variational layer's KL enters the loss once per step.

However often a layer is called within one call of the outermost model
(shared by two branches, inside `TimeDistributed`, as part of an RNN cell,
in a `fori_loop`), `model.losses` holds kl_weight * KL(q || p) of its
weights once (the layer's `KLRegularizer`), each read of the losses logs
exactly that term once in the layer's `kl_tracker`, and `KLScheduler`'s
`loss - kl` is the data loss (tfp_bnn/layers/_kl_tracking.py).
The expected KL is computed here with `tfd.kl_divergence` on the layer's
posterior and prior (the layer's own closed form for NodeDense).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import Conv2DReparameterization
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseVariational
from tfp_bnn.layers import NodeDense

tfd = tfp.distributions
KL_WEIGHT = 0.01


def _penalty(layer):
    """kl_weight * KL(q || p), computed without the layer's call path."""
    if isinstance(layer, NodeDense):
        kl = layer.kl_divergence()  # closed form for the Gaussian posterior
    else:
        # Element-wise closed form of Independent(Normal) || Sample(Normal).
        kl = tf.reduce_sum(tfd.kl_divergence(layer.kernel_posterior.distribution,
                                             layer.kernel_prior.distribution))
    return float(layer.kl_weight.numpy()) * float(kl)


def _total(losses):
    return float(tf.add_n(losses)) if losses else 0.0


def _rows_logged(layer):
    return float(keras.ops.convert_to_numpy(layer.kl_tracker.count))


LAYERS = {
    "DenseFlipout": (lambda: DenseFlipout(3, kl_weight=KL_WEIGHT, seed=1), (3,)),
    "Conv2DReparameterization": (
        lambda: Conv2DReparameterization(2, 3, padding="same", kl_weight=KL_WEIGHT, seed=2),
        (6, 6, 2)),
    "DenseVariational": (
        lambda: DenseVariational(3, kl_weight=KL_WEIGHT, kl_use_exact=True, seed=3), (3,)),
    "NodeDense": (lambda: NodeDense(3, kl_weight=KL_WEIGHT, seed=4), (3,)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_shared_by_two_branches_adds_its_kl_once(name):
    make, shape = LAYERS[name]
    layer = make()
    a, b = keras.Input(shape), keras.Input(shape)
    model = keras.Model([a, b], keras.layers.Add()([layer(a), layer(b)]))
    rng = np.random.default_rng(0)
    xa, xb = (rng.normal(size=(4, *shape)).astype("float32") for _ in range(2))
    layer.kl_tracker.reset_state()
    model([xa, xb], training=True)
    losses = model.losses
    assert len(losses) == 1
    np.testing.assert_allclose(_total(losses), _penalty(layer), rtol=1e-5)
    # One read of the losses, one entry, for the 4 rows of one call (two would log 8).
    assert _rows_logged(layer) == 4.0
    np.testing.assert_allclose(float(layer.kl_tracker.result()), _penalty(layer), rtol=1e-5)


def test_every_forward_pass_adds_the_kl_again():
    layer = DenseFlipout(3, kl_weight=KL_WEIGHT, seed=1)
    inp = keras.Input((3,))
    model = keras.Model(inp, keras.layers.Add()([layer(inp), layer(inp)]))
    x = np.ones((2, 3), "float32")
    for _ in range(2):  # the second pass must not find the KL "already counted"
        model(x, training=True)
        assert len(model.losses) == 1
        np.testing.assert_allclose(_total(model.losses), _penalty(layer), rtol=1e-5)

    @tf.function
    def two_passes(x):
        model(x, training=True)
        first = tf.add_n(model.losses)
        model(x, training=True)
        return first, tf.add_n(model.losses), len(model.losses)

    first, second, count = two_passes(x)
    assert count == 1
    np.testing.assert_allclose([float(first), float(second)], [_penalty(layer)] * 2, rtol=1e-5)


@pytest.mark.parametrize("name", ["DenseFlipout", "NodeDense"])
def test_time_distributed_over_five_steps_adds_the_kl_once(name):
    layer = LAYERS[name][0]()
    inp = keras.Input((5, 3))
    model = keras.Model(inp, keras.layers.TimeDistributed(layer)(inp))
    x = np.random.default_rng(1).normal(size=(4, 5, 3)).astype("float32")
    layer.kl_tracker.reset_state()
    model(x, training=True)
    losses = model.losses
    assert len(losses) == 1
    np.testing.assert_allclose(_total(losses), _penalty(layer), rtol=1e-5)
    assert _rows_logged(layer) == 4.0


def test_time_distributed_over_unknown_steps_adds_the_kl_once():
    # An unknown time axis makes TimeDistributed use tf.vectorized_map. Batch
    # and time are both 5: Keras 3.15's vectorized path indexes the time axis
    # with the batch size.
    layer = DenseFlipout(2, kl_weight=KL_WEIGHT, seed=1)
    wrapper = keras.layers.TimeDistributed(layer)
    wrapper.build((None, None, 3))

    @tf.function(input_signature=[tf.TensorSpec((None, None, 3), "float32")])
    def forward(x):
        outputs = wrapper(x, training=True)
        losses = wrapper.losses
        return outputs, tf.add_n(losses), len(losses)

    layer.kl_tracker.reset_state()
    outputs, total, count = forward(tf.ones((5, 5, 3)))
    assert outputs.shape == (5, 5, 2) and count == 1
    np.testing.assert_allclose(float(total), _penalty(layer), rtol=1e-5)
    assert _rows_logged(layer) == 1.0  # the batch size is not static in the map


@keras.saving.register_keras_serializable(package="tests_kl_once")
class FlipoutCell(keras.layers.Layer):
    """A minimal RNN cell: h' = tanh(DenseFlipout([x, h]))."""

    def __init__(self, units, seed=1, **kwargs):
        super().__init__(**kwargs)
        self.units, self.seed = units, seed
        self.state_size = units
        self.dense = DenseFlipout(units, activation="tanh", kl_weight=KL_WEIGHT, seed=seed)

    def build(self, input_shape):
        self.dense.build((None, input_shape[-1] + self.units))

    def call(self, inputs, states, training=None):
        h = self.dense(tf.concat([inputs, states[0]], -1), training=training)
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "units": self.units, "seed": self.seed}


class DenseFourTimes(keras.layers.Layer):
    """Applies one DenseFlipout four times in a `fori_loop` (a tf.while_loop when traced)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = DenseFlipout(3, activation="tanh", kl_weight=KL_WEIGHT, seed=5)

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, inputs, training=None):
        return keras.ops.fori_loop(0, 4, lambda i, h: self.dense(h, training=training), inputs)


def _rnn_layers(model):
    return [layer.cell.dense for layer in model._flatten_layers()
            if isinstance(layer, keras.layers.RNN)]


@pytest.mark.parametrize("wrap", ["rnn", "bidirectional", "unrolled"])
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_rnn_cell_calling_a_variational_layer_adds_its_kl_once(wrap, traced):
    rnn = keras.layers.RNN(FlipoutCell(4), unroll=wrap == "unrolled")
    inp = keras.Input((5, 3))
    model = keras.Model(inp, (keras.layers.Bidirectional(rnn) if wrap == "bidirectional"
                              else rnn)(inp))
    x = np.random.default_rng(2).normal(size=(2, 5, 3)).astype("float32")

    def forward(x):
        model(x, training=True)
        return tf.add_n(model.losses), len(model.losses)

    total, count = (tf.function(forward) if traced else forward)(x)
    denses = _rnn_layers(model)
    # Bidirectional copies the cell: two DenseFlipouts, each counted once.
    assert len(denses) == (2 if wrap == "bidirectional" else 1) == count
    np.testing.assert_allclose(float(total), sum(_penalty(d) for d in denses), rtol=1e-5)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_layer_called_in_a_while_loop_body_adds_its_kl_once(traced):
    layer = DenseFourTimes()
    x = np.ones((2, 3), "float32")

    def forward(x):
        outputs = layer(x, training=True)
        return outputs, tf.add_n(layer.losses), len(layer.losses)

    layer.build((None, 3))
    layer.dense.kl_tracker.reset_state()
    outputs, total, count = (tf.function(forward) if traced else forward)(x)
    assert outputs.shape == (2, 3) and count == 1
    np.testing.assert_allclose(float(total), _penalty(layer.dense), rtol=1e-5)
    np.testing.assert_allclose(float(layer.dense.kl_tracker.result()), _penalty(layer.dense),
                               rtol=1e-5)


def _restore_seeds(model, states):
    for generator, state in zip(_seed_generators(model), states):
        generator.state.assign(state)


def _seed_generators(model):
    return [layer.seed_generator for layer in model._flatten_layers()
            if hasattr(layer, "seed_generator")]


def _shared_and_time_distributed():
    shared = DenseFlipout(2, seed=1)
    inp = keras.Input((5, 3))
    per_step = keras.layers.Flatten()(keras.layers.TimeDistributed(shared)(inp))
    pooled = shared(keras.layers.GlobalAveragePooling1D()(inp))
    out = keras.layers.Dense(1, kernel_initializer="ones")(
        keras.layers.Concatenate()([per_step, pooled]))
    return keras.Model(inp, out), [shared]


def _rnn_model():
    inp = keras.Input((5, 3))
    model = keras.Model(inp, keras.layers.Dense(1, kernel_initializer="ones")(
        keras.layers.RNN(FlipoutCell(4))(inp)))
    return model, _rnn_layers(model)


@pytest.mark.parametrize("build", [_shared_and_time_distributed, _rnn_model],
                         ids=["shared_and_time_distributed", "rnn"])
def test_fit_logs_the_kl_that_entered_the_loss(build):
    keras.utils.set_random_seed(0)
    n = 8
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 5, 3)).astype("float32")
    y = rng.normal(size=(n, 1)).astype("float32")
    model, layers = build()
    # A zero learning rate keeps the weights, so the step can be replayed.
    model.compile(keras.optimizers.SGD(0.0), "mse")
    states = [g.state.numpy() for g in _seed_generators(model)]
    history = model.fit(x, y, batch_size=n, epochs=1, shuffle=False, verbose=0,
                        callbacks=[KLScheduler(num_examples=n)])
    logs = {key: values[0] for key, values in history.history.items()}
    kl = sum(_penalty(layer) for layer in layers)
    assert all(float(layer.kl_weight.numpy()) == pytest.approx(1 / n) for layer in layers)
    np.testing.assert_allclose(logs["kl"], kl, rtol=1e-5)
    # Replay the step with the same weight noise: its data loss is loss - kl.
    _restore_seeds(model, states)
    data_loss = float(keras.losses.MeanSquaredError()(y, model(x, training=True)))
    np.testing.assert_allclose(_total(model.losses), kl, rtol=1e-5)
    np.testing.assert_allclose(logs["loss"] - logs["kl"], data_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logs["data_loss"], data_loss, rtol=1e-5, atol=1e-6)


class LoopOf(keras.layers.Layer):
    """Applies `inner` (3 -> 3 units) twice in a `fori_loop`."""

    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def build(self, input_shape):
        self.inner.build(input_shape)

    def call(self, inputs, training=None):
        return keras.ops.fori_loop(0, 2, lambda i, h: self.inner(h, training=training), inputs)


@pytest.mark.parametrize("make", [
    lambda: DenseFlipout(3, kl_weight=KL_WEIGHT, kl_estimator="mc", seed=6),
    lambda: NodeDense(3, kl_weight=KL_WEIGHT, posterior="flow", flow_length=1, seed=7),
], ids=["DenseFlipout_mc", "NodeDense_flow"])
def test_monte_carlo_kl_of_a_loop_body_is_estimated_outside_the_loop(make):
    # The KL is a fresh Monte Carlo estimate made where the losses are read,
    # outside the loop, and the tracker logs that very term.
    inner = make()
    layer = LoopOf(inner)
    layer.build((None, 3))

    @tf.function
    def forward(x):
        layer(x, training=True)
        losses = layer.losses
        return tf.add_n(losses), len(losses)

    inner.kl_tracker.reset_state()
    total, count = forward(tf.ones((4, 3)))
    assert count == 1 and np.isfinite(float(total))
    np.testing.assert_allclose(float(inner.kl_tracker.result()), float(total), rtol=1e-6)
    assert _rows_logged(inner) == 4.0  # the static batch size of the loop


@pytest.mark.jax
def test_shared_layer_in_fit_enters_the_loss_and_the_log_once():
    # One DenseFlipout called by two branches: one step of fit holds its
    # kl_weight * KL once in the loss and logs it once.
    keras.utils.set_random_seed(0)
    n = 8
    rng = np.random.default_rng(4)
    xa, xb = (rng.normal(size=(n, 3)).astype("float32") for _ in range(2))
    y = rng.normal(size=(n, 2)).astype("float32")
    layer = DenseFlipout(2, seed=1)
    a, b = keras.Input((3,)), keras.Input((3,))
    model = keras.Model([a, b], keras.layers.Add()([layer(a), layer(b)]))
    model.compile(keras.optimizers.SGD(0.0), "mse")  # the weights stay: the step replays
    states = [keras.ops.convert_to_numpy(g.state) for g in _seed_generators(model)]
    history = model.fit([xa, xb], y, batch_size=n, epochs=1, shuffle=False, verbose=0,
                        callbacks=[KLScheduler(num_examples=n)])
    logs = {key: values[0] for key, values in history.history.items()}
    # The default prior has a closed form: the KL does not depend on the draw.
    penalty = float(keras.ops.convert_to_numpy(layer.kl_divergence())) / n
    assert penalty > 0.1  # counted twice, the loss below would be off by this
    np.testing.assert_allclose(logs["kl"], penalty, rtol=1e-5)
    assert _rows_logged(layer) == n  # one step, weighted by its batch size
    _restore_seeds(model, states)
    data_loss = float(keras.losses.MeanSquaredError()(y, model([xa, xb], training=True)))
    np.testing.assert_allclose(logs["loss"], data_loss + penalty, rtol=1e-5)
    np.testing.assert_allclose(logs["data_loss"], data_loss, rtol=1e-5, atol=1e-6)

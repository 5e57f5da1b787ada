"""The standard battery for layers built from several variational sublayers.

`run_composite_layer_test(cls, kwargs, input_shape, num_kl_terms)` is
`run_bayesian_layer_test` for composite layers (attention, transformer
blocks): the layer has no random weight of its own, so instead of one KL
loss it must add exactly `num_kl_terms` (one per variational sublayer), and
the KL gradient must reach every posterior parameter of every sublayer. The
other checks are the same: config round trip, symbolic and eager calls,
sampling versus mean mode, seeded reproducibility, one `fit` step that
changes every trainable weight, and a `.keras` round trip under
`safe_mode=True` with identical weights and mean-mode outputs.
"""

import os
import tempfile

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _keras_internals
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.modes import set_mean_mode
from tfp_bnn.testing._common import random_inputs
from tfp_bnn.testing._common import require




def _self_call(layer, x, **kwargs):
    return layer(x, **kwargs)


def variational_sublayers(layer):
    """The `BayesianLayer`s inside `layer`, nested ones included."""
    return [sub for sub in _keras_internals.flatten_layers(layer, include_self=False)
            if isinstance(sub, BayesianLayer)]


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _check_config(cls, kwargs):
    layer = cls(**kwargs)
    config = layer.get_config()
    clone = cls.from_config(config)
    require(clone.get_config() == config, f"{cls.__name__}: config round trip changed it")


def _check_calls(cls, kwargs, input_shape, num_kl_terms, call):
    x = random_inputs(input_shape, 0)
    layer = cls(**kwargs)
    symbolic = call(layer, keras.Input(input_shape[1:], batch_size=input_shape[0]))
    first = _numpy(call(layer, x))
    require(first.shape == tuple(symbolic.shape),
            f"eager output {first.shape} != symbolic {symbolic.shape}")
    require(np.all(np.isfinite(first)), "eager output is not finite")
    sublayers = variational_sublayers(layer)
    require(len(sublayers) == num_kl_terms,
            f"expected {num_kl_terms} variational sublayers, found {len(sublayers)}")
    require(len(layer.losses) == num_kl_terms,
            f"expected {num_kl_terms} KL losses, got {len(layer.losses)}")
    require(all(np.isfinite(float(loss)) for loss in layer.losses), "a KL loss is not finite")
    second = _numpy(call(layer, x))
    require(not np.allclose(first, second), "two sampling calls gave the same output")
    require(set_mean_mode(layer, True) == num_kl_terms, "mean mode missed a sublayer")
    mean_a = _numpy(call(layer, x))
    mean_b = _numpy(call(layer, x))
    require(np.array_equal(mean_a, mean_b), "mean mode is not deterministic")
    trained = _numpy(call(layer, x, training=True))
    require(not np.allclose(trained, mean_a), "training=True did not sample in mean mode")
    set_mean_mode(layer, False)
    return layer


def _check_kl_gradient(layer, input_shape, call):
    x = random_inputs(input_shape, 1)
    sublayers = variational_sublayers(layer)
    params = [p for sub in sublayers for p in list(sub.kernel_params) + list(sub.bias_params or ())]
    with tf.GradientTape() as tape:
        call(layer, x, training=True)
        kl = tf.add_n(layer.losses)
    grads = tape.gradient(kl, params)
    for var, grad in zip(params, grads):
        require(grad is not None, f"KL has no gradient to {var.path}")
        require(np.all(np.isfinite(grad.numpy())), f"KL gradient to {var.path} not finite")
    for sub in sublayers:
        rho = sub.kernel_params[1]
        grad = grads[[id(p) for p in params].index(id(rho))]
        require(np.any(grad.numpy() != 0), f"KL gradient to {rho.path} is zero")


def _check_seed(cls, kwargs, input_shape, call):
    x = random_inputs(input_shape, 2)
    seeded = dict(kwargs, seed=123)
    a, b = cls(**seeded), cls(**seeded)
    out_a = [_numpy(call(a, x, training=True)) for _ in range(2)]
    out_b = [_numpy(call(b, x, training=True)) for _ in range(2)]
    for wa, wb in zip(a.weights, b.weights):
        require(np.array_equal(wa.numpy(), wb.numpy()), f"seeded init differs: {wa.path}")
    for ya, yb in zip(out_a, out_b):
        require(np.array_equal(ya, yb), "seeded layers gave different outputs")
    require(not np.allclose(out_a[0], out_a[1]), "seeded calls repeat their noise")


def _check_fit_and_save(cls, kwargs, input_shape, call):
    x = random_inputs(input_shape, 3)
    y = np.random.default_rng(4).normal(size=(input_shape[0], 1)).astype("float32")
    inputs = keras.Input(input_shape[1:])
    hidden = keras.layers.Flatten()(call(cls(**kwargs), inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    before = [v.numpy().copy() for v in model.trainable_variables]
    history = model.fit(x, y, epochs=1, batch_size=input_shape[0], verbose=0)
    require(np.isfinite(history.history["loss"][0]), "fit loss is not finite")
    for b, v in zip(before, model.trainable_variables):
        require(not np.array_equal(b, v.numpy()), f"{v.path} did not change after a fit step")
    set_mean_mode(model, True)
    expected = _numpy(model(x))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path, safe_mode=True)
    require(len(model.weights) == len(loaded.weights), "weight count changed on load")
    for a, b in zip(model.weights, loaded.weights):
        require(np.array_equal(a.numpy(), b.numpy()), f"weight {a.path} changed on load")
    require(np.array_equal(expected, _numpy(loaded(x))),
            "mean-mode outputs changed after .keras load")
    set_mean_mode(loaded, False)
    require(not np.allclose(_numpy(loaded(x)), expected),
            "loaded model cannot switch back to sampling")


def run_composite_layer_test(cls, kwargs, input_shape, num_kl_terms, call=None):
    """Runs the standard checks for the composite layer `cls(**kwargs)`.

    Args:
        cls: a layer class made of tfp_bnn variational sublayers.
        kwargs: constructor arguments (no `seed`; the helper sets its own).
        input_shape: full input shape including the batch dimension.
        num_kl_terms: the number of variational sublayers (= KL losses).
        call: `call(layer, x, **call_kwargs)` applies the layer to one input
            (e.g. self-attention `layer(x, x, **call_kwargs)`); default
            `layer(x, **call_kwargs)`.

    Raises:
        AssertionError naming the first check that failed.
    """
    call = call or _self_call
    _check_config(cls, kwargs)
    layer = _check_calls(cls, kwargs, input_shape, num_kl_terms, call)
    _check_kl_gradient(layer, input_shape, call)
    _check_seed(cls, kwargs, input_shape, call)
    _check_fit_and_save(cls, kwargs, input_shape, call)

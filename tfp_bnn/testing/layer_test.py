"""The standard battery every variational layer must pass.

`run_bayesian_layer_test(cls, kwargs, input_shape)` checks, for one layer
configuration: config round trip, symbolic and eager calls, the KL loss
(exactly one, finite, with gradients to every posterior parameter),
sampling versus mean mode, seeded reproducibility, one `fit` step that
changes the weights, and a `.keras` save/load round trip under
`safe_mode=True` with identical weights and mean-mode outputs.
"""

import os
import tempfile

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn.modes import set_mean_mode
from tfp_bnn.testing._common import random_inputs
from tfp_bnn.testing._common import require


def _check_config(cls, kwargs):
    layer = cls(**kwargs)
    config = layer.get_config()
    clone = cls.from_config(config)
    require(clone.get_config() == config, f"{cls.__name__}: config round trip changed it")


def _check_calls(cls, kwargs, input_shape):
    x = random_inputs(input_shape, 0)
    layer = cls(**kwargs)
    symbolic = layer(keras.Input(input_shape[1:], batch_size=input_shape[0]))
    expected = layer.compute_output_shape(input_shape)
    require(tuple(symbolic.shape) == tuple(expected),
            f"symbolic output {symbolic.shape} != compute_output_shape {expected}")
    first = keras.ops.convert_to_numpy(layer(x))
    require(first.shape == tuple(expected), f"eager output {first.shape} != {expected}")
    require(np.all(np.isfinite(first)), "eager output is not finite")
    require(len(layer.losses) == 1, f"expected one KL loss, got {len(layer.losses)}")
    require(np.isfinite(float(layer.losses[0])), "KL loss is not finite")
    second = keras.ops.convert_to_numpy(layer(x))
    require(not np.allclose(first, second), "two sampling calls gave the same output")
    set_mean_mode(layer, True)
    mean_a = keras.ops.convert_to_numpy(layer(x))
    mean_b = keras.ops.convert_to_numpy(layer(x))
    require(np.array_equal(mean_a, mean_b), "mean mode is not deterministic")
    # Training samples even in mean mode.
    trained = keras.ops.convert_to_numpy(layer(x, training=True))
    require(not np.allclose(trained, mean_a), "training=True did not sample in mean mode")
    set_mean_mode(layer, False)
    return layer


def _check_kl_gradient(layer, input_shape):
    x = random_inputs(input_shape, 1)
    params = list(layer.kernel_params) + list(layer.bias_params or ())
    require(params, "no posterior parameters found")
    grads = _kl_gradients(layer, x, params)
    for var, grad in zip(params, grads):
        require(grad is not None, f"KL has no gradient to {var.path}")
        require(np.all(np.isfinite(grad)), f"KL gradient to {var.path} not finite")
    rho_grads = grads[1::2]  # posterior params come as (loc, rho) pairs
    require(any(np.any(g != 0) for g in rho_grads), "KL gradient to rho is zero")


def _kl_gradients(layer, x, params):
    """Gradients of the layer's KL loss (one training call) to `params`, as NumPy (or None)."""
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415 - the JAX backend imported it

        trainable = layer.trainable_variables
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def kl_of(values):
            _, _, losses = layer.stateless_call(values, non_trainable, x, training=True,
                                                return_losses=True)
            return sum(losses)

        grads = jax.grad(kl_of)([v.value for v in trainable])
        by_id = {id(v): np.asarray(g) for v, g in zip(trainable, grads)}
        return [by_id.get(id(p)) for p in params]
    with tf.GradientTape() as tape:
        layer(x, training=True)
        kl = tf.add_n(layer.losses)
    return [None if g is None else g.numpy() for g in tape.gradient(kl, params)]


def _check_seed(cls, kwargs, input_shape):
    x = random_inputs(input_shape, 2)
    seeded = dict(kwargs, seed=123)
    a, b = cls(**seeded), cls(**seeded)
    out_a = [keras.ops.convert_to_numpy(a(x, training=True)) for _ in range(2)]
    out_b = [keras.ops.convert_to_numpy(b(x, training=True)) for _ in range(2)]
    for wa, wb in zip(a.weights, b.weights):
        require(np.array_equal(wa.numpy(), wb.numpy()), f"seeded init differs: {wa.path}")
    for ya, yb in zip(out_a, out_b):
        require(np.array_equal(ya, yb), "seeded layers gave different outputs")


def _model(cls, kwargs, input_shape):
    return keras.Sequential(
        [keras.Input(input_shape[1:]), cls(**kwargs), keras.layers.Flatten(),
         keras.layers.Dense(1)]
    )


def _check_fit_and_save(cls, kwargs, input_shape):
    x = random_inputs(input_shape, 3)
    y = np.random.default_rng(4).normal(size=(input_shape[0], 1)).astype("float32")
    check_fit_and_save(_model(cls, kwargs, input_shape), x, y)


def check_fit_and_save(model, x, y, epochs=1, learning_rate=1e-2, **fit_kwargs):
    """`fit` on (x, y) (one full-batch step by default) changes every trainable
    variable of `model`; its mean-mode outputs survive a `.keras` round trip
    under `safe_mode=True`, and the loaded model samples again. Returns the
    `fit` history."""
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
    before = [v.numpy().copy() for v in model.trainable_variables]
    fit_kwargs.setdefault("batch_size", len(y))
    history = model.fit(x, y, epochs=epochs, verbose=0, **fit_kwargs)
    require(np.isfinite(history.history["loss"][0]), "fit loss is not finite")
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    require(all(changed), "a trainable variable did not change after one fit step")
    set_mean_mode(model, True)
    expected = keras.ops.convert_to_numpy(model(x))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path, safe_mode=True)
    for a, b in zip(model.weights, loaded.weights):
        require(np.array_equal(a.numpy(), b.numpy()), f"weight {a.path} changed on load")
    require(np.array_equal(expected, keras.ops.convert_to_numpy(loaded(x))),
            "mean-mode outputs changed after .keras load")
    set_mean_mode(loaded, False)
    sampled = keras.ops.convert_to_numpy(loaded(x))
    require(not np.allclose(sampled, expected), "loaded model cannot switch back to sampling")
    return history


def run_bayesian_layer_test(cls, kwargs, input_shape):
    """Runs the standard checks for `cls(**kwargs)` on inputs of `input_shape`.

    Args:
        cls: a `BayesianLayer` subclass.
        kwargs: constructor arguments (no `seed`; the helper sets its own).
        input_shape: full input shape including the batch dimension.

    Raises:
        AssertionError naming the first check that failed.
    """
    _check_config(cls, kwargs)
    layer = _check_calls(cls, kwargs, input_shape)
    _check_kl_gradient(layer, input_shape)
    _check_seed(cls, kwargs, input_shape)
    _check_fit_and_save(cls, kwargs, input_shape)

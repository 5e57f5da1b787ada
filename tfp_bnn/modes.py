"""Switching variational layers between sampling and posterior-mean outputs.

Layers sample weights by default, in training and at inference. Mean mode
makes inference deterministic: every variational layer uses its posterior
means. Training always samples (a network trained on its means alone would
learn nothing about its uncertainty).

The switch is a non-trainable variable in each layer (`layer.sampling`,
1.0 = sample, 0.0 = mean), so it is read at run time by compiled functions,
saved in `.keras` files, and captured by an exported SavedModel.
"""

import contextlib

from tfp_bnn import _keras_internals


def _is_stochastic(layer):
    """A layer with a mean-mode switch: it says so with `stochastic_layer = True`.

    The variational layers (`BayesianLayer`), `MCDropout` and the node-based
    layers set that class attribute and own a `sampling` variable.
    """
    return getattr(type(layer), "stochastic_layer", False) and hasattr(layer, "sampling")


def bayesian_layers(model):
    """The stochastic layers in `model` (a layer or model), nested ones included.

    Stochastic layers sample at inference and have a mean-mode switch: the
    variational layers, `MCDropout` and the node-based layers.

    Args:
        model: a Keras model or layer.

    Returns:
        A list of layers in the model's order (`[model]` if `model` is one).

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(4),
    ...                           keras.layers.Dropout(0.5), tfp_bnn.layers.MCDropout(0.1),
    ...                           keras.layers.Dense(1)])
    >>> [type(layer).__name__ for layer in tfp_bnn.bayesian_layers(model)]
    ['DenseFlipout', 'MCDropout']
    """
    if _is_stochastic(model):
        return [model]
    return [layer for layer in _keras_internals.flatten_layers(model, include_self=False)
            if _is_stochastic(layer)]


def kl_layers(model):
    """The stochastic layers of `model` that add a weighted KL to the loss.

    They own a `kl_weight` variable (variational and node-based layers; MC
    dropout has none), which `tfp_bnn.callbacks.KLScheduler` sets.

    Args:
        model: a Keras model or layer.

    Returns:
        A list of layers in the model's order.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(4),
    ...                           keras.layers.Dropout(0.5), tfp_bnn.layers.MCDropout(0.1),
    ...                           keras.layers.Dense(1)])
    >>> [type(layer).__name__ for layer in tfp_bnn.kl_layers(model)]
    ['DenseFlipout']
    """
    return [layer for layer in bayesian_layers(model) if hasattr(layer, "kl_weight")]


def set_mean_mode(model, enabled=True):
    """Turns mean mode on (`enabled=True`) or off for every stochastic layer.

    Args:
        model: a Keras model or layer.
        enabled: True for deterministic posterior-mean outputs at inference,
            False to sample (the default state).

    Returns:
        The number of variational layers switched.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> x = np.ones((1, 3), "float32")
    >>> tfp_bnn.set_mean_mode(model)        # deterministic predictions
    1
    >>> bool(np.all(model(x) == model(x)))
    True
    >>> tfp_bnn.set_mean_mode(model, False) # back to sampling
    1
    """
    layers = bayesian_layers(model)
    for layer in layers:
        layer.sampling.assign(0.0 if enabled else 1.0)
    return len(layers)


def is_mean_mode(model):
    """True if every stochastic layer of `model` is in mean mode.

    Args:
        model: a Keras model or layer.

    Returns:
        A bool; False when the model has no stochastic layer.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> tfp_bnn.is_mean_mode(model)
    False
    >>> with tfp_bnn.mean_mode(model):
    ...     print(tfp_bnn.is_mean_mode(model))
    True
    """
    layers = bayesian_layers(model)
    return bool(layers) and all(float(layer.sampling.numpy()) == 0.0 for layer in layers)


@contextlib.contextmanager
def mean_mode(model, enabled=True):
    """Context manager: mean mode inside the block, previous states after it.

    Args:
        model: a Keras model or layer.
        enabled: the mode inside the block: True for posterior means, False
            to sample (e.g. inside a block that set mean mode).

    Yields:
        `model`.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> x = np.ones((4, 3), "float32")
    >>> with tfp_bnn.mean_mode(model):
    ...     y = model.predict(x, verbose=0)
    >>> y.shape, tfp_bnn.is_mean_mode(model)   # sampling again after the block
    ((4, 2), False)
    """
    layers = bayesian_layers(model)
    previous = [float(layer.sampling.numpy()) for layer in layers]
    set_mean_mode(model, enabled)
    try:
        yield model
    finally:
        for layer, value in zip(layers, previous):
            layer.sampling.assign(value)

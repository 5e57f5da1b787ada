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

def _is_stochastic(layer):
    """A layer with a mean-mode switch: it says so with `stochastic_layer = True`.

    The variational layers (`BayesianLayer`), `MCDropout` and the node-based
    layers set that class attribute and own a `sampling` variable.
    """
    return getattr(type(layer), "stochastic_layer", False) and hasattr(layer, "sampling")


def bayesian_layers(model):
    """The stochastic layers in `model` (a layer or model), nested ones included."""
    if _is_stochastic(model):
        return [model]
    return [layer for layer in model._flatten_layers(include_self=False) if _is_stochastic(layer)]


def kl_layers(model):
    """The stochastic layers of `model` that add a weighted KL to the loss.

    They own a `kl_weight` variable (variational and node-based layers; MC
    dropout has none), which `tfp_bnn.callbacks.KLScheduler` sets.
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
    >>> tfp_bnn.set_mean_mode(model)        # deterministic predictions
    >>> tfp_bnn.set_mean_mode(model, False) # back to sampling
    """
    layers = bayesian_layers(model)
    for layer in layers:
        layer.sampling.assign(0.0 if enabled else 1.0)
    return len(layers)


def is_mean_mode(model):
    """True if every variational layer of `model` is in mean mode."""
    layers = bayesian_layers(model)
    return bool(layers) and all(float(layer.sampling.numpy()) == 0.0 for layer in layers)


@contextlib.contextmanager
def mean_mode(model, enabled=True):
    """Context manager: mean mode inside the block, previous states after it.

    Example:
    >>> with tfp_bnn.mean_mode(model):
    ...     y = model.predict(x)
    """
    layers = bayesian_layers(model)
    previous = [float(layer.sampling.numpy()) for layer in layers]
    set_mean_mode(model, enabled)
    try:
        yield model
    finally:
        for layer, value in zip(layers, previous):
            layer.sampling.assign(value)

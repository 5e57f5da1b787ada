"""Helpers the layer test batteries of this package share."""

import numpy as np


def require(condition, message):
    """Raises AssertionError(message) unless `condition` (kept under `python -O`)."""
    if not condition:
        raise AssertionError(message)


def random_inputs(input_shape, seed):
    """Standard normal float32 inputs of `input_shape`, drawn from `seed`."""
    return np.random.default_rng(seed).normal(size=input_shape).astype("float32")

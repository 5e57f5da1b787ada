"""Trace-time switches that change what a variational layer builds.

These are Python flags read while a function is traced, not run-time state:
they let `tfp_bnn.export` and `tfp_bnn.predict` build graphs that differ from
the training graph (no KL term, posterior means, many weight samples at
once) without touching the layers' variables.

Monte Carlo prediction in one traced computation (`sample_trace`): the
inputs of a batch of B examples are tiled S times along the batch axis,
sample-major, so row s * B + b is example b under weight sample s. Inside the
block every variational layer reads its input as [S, B, ...] and applies S
independent weight samples, one per slice; layers without weights to sample
(dropout, local reparameterization, deterministic layers) act row by row,
which is already correct for tiled rows. The weight samples are drawn once by
`draw_samples` and passed in, so that every chunk of inputs meets the same S
networks and the random numbers are paid for once per chunk of samples, not
once per chunk of inputs.
"""

import contextlib
import threading

from tfp_bnn import _validation

_FLAGS = threading.local()


@contextlib.contextmanager
def _setting(name, value):
    previous = getattr(_FLAGS, name, None)
    setattr(_FLAGS, name, value)
    try:
        yield
    finally:
        setattr(_FLAGS, name, previous)


def flag(name):
    """The value of a trace-time setting (None or False when unset)."""
    return getattr(_FLAGS, name, None)


def forced_mean_trace():
    """Inside this block, layers trace their posterior-mean computation.

    This is a trace-time switch for building serving functions (see
    `tfp_bnn.export`); at run time use `tfp_bnn.set_mean_mode`.
    """
    return _setting("force_mean", True)


def no_kl_trace():
    """Inside this block, layers trace no KL term (prediction-only graphs)."""
    return _setting("skip_kl", True)


class SampleContext:
    """What a layer needs to know while a sample-tiled batch is traced.

    Attributes:
        num_samples: S, the number of weight samples (tiles of the batch).
        draws: dict from `id(layer)` to the weight samples that layer returned
            from `predictive_samples(S)`, drawn ahead of the call; a layer
            missing from it draws its own.
        first_sample: the index of the call's first sample among all the
            samples of the prediction: 0 on TensorFlow, where one call holds
            the S samples of a chunk; on JAX, where each sample group is one
            mapped call (`tfp_bnn.predict._jax_runner`), the group's first
            index (a traced int), for layers whose sample s differs by s
            (the node layers' mixture component).
    """

    def __init__(self, num_samples, draws=None):
        self.num_samples = _validation.integer("num_samples", num_samples)
        self.draws = dict(draws or {})
        self.first_sample = 0


def sample_trace(num_samples, draws=None):
    """Inside this block, layers trace S = `num_samples` weight samples per call.

    Inputs must be tiled sample-major (see the module docstring). The KL is
    not traced either: this is a prediction graph.
    """
    context = SampleContext(num_samples, draws)

    @contextlib.contextmanager
    def block():
        with _setting("sample_context", context), no_kl_trace():
            yield context

    return block()


def sample_context():
    """The active `SampleContext`, or None outside `sample_trace`."""
    return flag("sample_context")

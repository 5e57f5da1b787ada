"""Monte Carlo forward passes: T weight samples in a few traced calls.

`tfp_bnn.predict` never loops over T model calls in Python. For a chunk of S
weight samples it

1. draws the S samples of every variational layer's weights in one traced
   function (`BayesianLayer.predictive_samples`), once for all inputs, and
2. for each chunk of B inputs, tiles the inputs S times along the batch axis
   and calls the model once inside `sample_trace(S)`, where each variational
   layer applies weight sample s to tile s (one batched matmul for Dense);
   dropout, local reparameterization and deterministic layers act row by
   row, which is already right for tiled rows (see `layers/_tracing.py`).

So every input meets the same T networks, the random numbers cost T times
the weight count once per prediction (not once per input chunk), and memory
per call is bounded by `max_rows` = S * B tiled rows.

A prediction checks its arguments once (`prepare` returns a `Plan`) and reads
the outputs from the generator `chunks`. `tfp_bnn.export.export_predictive`
serves the same draws and model call (`MonteCarloRunner.sampled_outputs`)
inside its own `tf.function`, read with the same `tfp_bnn._predictive` math.

On Keras' JAX backend `chunks` runs the model statelessly instead
(`tfp_bnn.predict._jax_runner`): each chunk of S samples is one jitted
`jax.vmap` of `model.stateless_call` over S random states, sample t's state
folded from the model's `SeedGenerator` states and t, so sample t is one
network for every chunk of inputs and any `samples_per_call`. Those calls are
always compiled (`jit_compile` has no effect there).
"""

import collections
import functools
import math
import weakref

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn import _keras_internals
from tfp_bnn.distributions.carrier import carries_distribution
from tfp_bnn.distributions.carrier import distribution_of
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers.distribution.distribution_lambda import DistributionLambda
from tfp_bnn.posteriors.mean_field import worth_fusing
from tfp_bnn.predict._inputs import as_arrays
from tfp_bnn.predict._inputs import check_model
from tfp_bnn.predict.limits import DEFAULT_MAX_ROWS
from tfp_bnn.predict.limits import count_calls
from tfp_bnn.predict.limits import plan
from tfp_bnn.predict.limits import sample_chunks

Plan = collections.namedtuple(
    "Plan", ["inputs", "leaves", "count", "num_samples", "batch_size", "samples_per_call",
             "multiple"])
Plan.__doc__ = """A prediction's checked arguments, from `prepare`: the inputs (as
`as_arrays` returns them: the nest, its flat leaves and N), T, the chunk sizes and
the multiple every sample chunk keeps (`sample_multiple`)."""

Chunk = collections.namedtuple("Chunk", ["t0", "t1", "n0", "n1", "outputs"])
Chunk.__doc__ = """Samples t0..t1-1 of inputs n0..n1-1: `outputs` a nest of NumPy arrays
[t1 - t0, n1 - n0, ...], or the output distribution (batch (t1 - t0) * (n1 - n0),
sample-major) when `chunks(..., distributions=True)`."""


def _own(method):
    """`method` (bound) as a callable of its own for TensorFlow's retracing count.

    TensorFlow warns "N out of the last N calls ... triggered tf.function
    retracing" per Python code object, so the first trace of every model's
    runner (one per model, `runner_for`) would count as a retrace of one
    function: predicting with five models in a row printed that warning, which
    tells the user to fix a loop they do not have. A partial has no code
    object and is counted on its own; a real retrace of one runner (a new
    input signature) still counts.
    """
    return functools.partial(method)


class MonteCarloRunner:
    """Traced functions that run `model` on S weight samples at once.

    Args:
        model: a built Keras model (or layer) made of any layers; the
            stochastic ones are tfp_bnn's variational layers and `MCDropout`.
        jit_compile: compile the model calls with XLA.

    Attributes:
        traced_draw, traced_call, traced_call_distribution: the `tf.function`s behind
            `draw`, `call` and `call_distribution` (for audits that trace them).

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> runner = MonteCarloRunner(model)
    >>> draws = runner.draw(4)   # 4 weight samples of every variational layer
    >>> runner.call(np.ones((5, 3), "float32"), draws, 4).shape
    TensorShape([4, 5, 2])
    """

    def __init__(self, model, jit_compile=False):
        self.model = model
        self.layers = [
            layer for layer in _keras_internals.flatten_layers(model, include_self=True)
            if isinstance(layer, BayesianLayer)
        ]
        # Whatever `jit_compile` says, the draws of a model with a large weight
        # tensor (FUSE_MIN_SIZE, as in training) are XLA-compiled: XLA fuses
        # loc + scale * eps into one pass and its ThreeFry/erfinv normals are
        # faster on CPU than TensorFlow's Philox kernel (T = 100 samples of a
        # 784-400-400-10 MLP's weights: 0.13 s against 0.6 s on 2 cores).
        # Small models' draws run op by op: there the compilation is the cost
        # (a model's first draw took 0.8-1.1 s compiled for bbb_mlp, 2.4-2.8 s
        # for bayesian_transformer, against 0.04-0.18 s op by op, 2 cores).
        large = any(worth_fusing(w.shape) for layer in self.layers for w in layer.weights)
        self.traced_draw = tf.function(_own(self._draw_impl), jit_compile=large)
        self.traced_call = tf.function(_own(self._call_impl), jit_compile=jit_compile,
                                       reduce_retracing=True)
        self.traced_distribution = False
        self.traced_call_distribution = tf.function(_own(self._distribution_impl),
                                                    jit_compile=jit_compile,
                                                    reduce_retracing=True)

    def _draw_impl(self, num_samples):
        return [layer.predictive_samples(num_samples) for layer in self.layers]

    def _tiled_outputs(self, inputs, draws, num_samples):
        """The model's outputs on inputs tiled S times, under the drawn weights."""
        def tile(x):
            x = tf.convert_to_tensor(x)
            # tf.rank, not x.shape.rank: a relaxed retrace may leave the rank unknown.
            multiples = tf.concat([[num_samples], tf.ones([tf.rank(x) - 1], tf.int32)], 0)
            return tf.tile(x, multiples)

        tiled = keras.tree.map_structure(tile, inputs)
        by_layer = {id(layer): draw for layer, draw in zip(self.layers, draws)}
        with sample_trace(num_samples, by_layer):
            return self.model(tiled, training=False)

    def _distribution_impl(self, inputs, draws, num_samples):
        """The output distribution, batch axis S * B sample-major (row s * B + b)."""
        return output_distribution(self._tiled_outputs(inputs, draws, num_samples))

    def _call_impl(self, inputs, draws, num_samples):
        batch = tf.shape(keras.tree.flatten(inputs)[0])[0]
        outputs = self._tiled_outputs(inputs, draws, num_samples)
        # Read at trace time: a subclassed model's distribution head shows only here.
        self.traced_distribution = any(carries_distribution(y) for y in keras.tree.flatten(outputs))

        def split(y):
            y = tf.convert_to_tensor(y)
            return tf.reshape(y, tf.concat([[num_samples, batch], tf.shape(y)[1:]], 0))

        return keras.tree.map_structure(split, outputs)

    def sampled_outputs(self, inputs, num_samples, distribution=False):
        """Untraced: draws S weight samples and runs the model on them, outputs [S, B, ...].

        With `distribution`, the output distribution (batch S * B, sample-major). The body
        of a caller's own `tf.function` (the served predictive of `tfp_bnn.export`); the
        same pieces `chunks` runs through this runner's traced functions.

        Args:
            inputs: a batch [B, ...] (or the model's input structure).
            num_samples: S.
            distribution: return the output distribution instead of the outputs.

        Returns:
            Outputs [S, B, ...], or a `tfd.Distribution` of batch [S * B, ...].
        """
        draws = self.traced_draw(num_samples)
        if distribution:
            return self._distribution_impl(inputs, draws, num_samples)
        return self._call_impl(inputs, draws, num_samples)

    def draw(self, num_samples):
        """Weight samples of every variational layer for one chunk of samples.

        Args:
            num_samples: S, an int or a scalar int tensor.

        Returns:
            The drawn weights, one entry per variational layer.
        """
        return self.traced_draw(num_samples)

    def call(self, inputs, draws, num_samples):
        """Model outputs [S, B, ...] for inputs [B, ...] under the drawn samples.

        Args:
            inputs: a batch [B, ...] (or the model's input structure).
            draws: what `draw(num_samples)` returned.
            num_samples: S.

        Returns:
            Outputs [S, B, ...].
        """
        return self.traced_call(inputs, draws, num_samples)

    def call_distribution(self, inputs, draws, num_samples):
        """The output distribution of a distribution head, batch [S * B, ...] sample-major.

        Args:
            inputs: a batch [B, ...] (or the model's input structure).
            draws: what `draw(num_samples)` returned.
            num_samples: S.

        Returns:
            A `tfd.Distribution` of batch [S * B, ...].
        """
        return self.traced_call_distribution(inputs, draws, num_samples)


def output_distribution(outputs):
    """The distribution a model's single output carries (see `distribution_of`)."""
    if isinstance(outputs, (list, tuple, dict)):
        raise ValueError("A distribution prediction needs a model with a single output, "
                         f"got {len(outputs)} outputs.")
    return distribution_of(outputs)


def distribution_chunks(plan):
    """(How many output distributions `chunks(..., distributions=True)` yields, the
    samples each holds) for `plan`.

    One per traced call on TensorFlow. On JAX one per sample group (`plan.multiple`
    samples, one for most models) and chunk of inputs: a mapped call's groups keep
    their distributions apart (see `_jax_runner.JaxMonteCarloRunner.call_distributions`).
    """
    per_chunk = plan.multiple if _backend.is_jax() else plan.samples_per_call
    return count_calls(plan.num_samples, plan.count, plan.batch_size, per_chunk), per_chunk


def output_layer(model):
    """The layer that makes a functional model's single output (inside nested models), or None."""
    try:
        outputs = list(model.outputs or [])
    except (AttributeError, ValueError, TypeError):  # subclassed: unknown until called
        return None
    if len(outputs) != 1:
        return None
    layer = _keras_internals.producing_layer(outputs[0])
    if isinstance(layer, keras.Model):  # a nested model: its own output layer decides
        return output_layer(layer)
    return layer


def has_distribution_head(model):
    """True if the model's (single) output is a tfp_bnn distribution layer's."""
    return isinstance(output_layer(model), DistributionLambda)


_RUNNERS = weakref.WeakKeyDictionary()


def runner_for(model, jit_compile=False):
    """The model's cached `MonteCarloRunner` (its traces are reused across calls)."""
    runners = _RUNNERS.setdefault(model, {})
    if jit_compile not in runners:
        runners[jit_compile] = MonteCarloRunner(model, jit_compile=jit_compile)
    return runners[jit_compile]


def prepare(model, x, num_samples, batch_size=None, samples_per_call=None,
            max_rows=DEFAULT_MAX_ROWS):
    """Checks the model, the inputs and every size once; returns a `Plan`.

    Bad arguments fail here with a message naming them, before anything is traced.
    """
    check_model(model)
    x, leaves, count = as_arrays(x, model)
    multiple = sample_multiple(model)
    num_samples, batch_size, samples_per_call = plan(num_samples, leaves, count, batch_size,
                                                     samples_per_call, max_rows, multiple)
    return Plan(x, leaves, count, num_samples, batch_size, samples_per_call, multiple)


def sample_multiple(model):
    """The number every traced call's sample count must be a multiple of (1 for most models).

    A layer that maps sample s of a trace to one of M fixed networks (a deep ensemble's
    members, `tfp_bnn.ensembles`) declares `samples_multiple = M`; the model needs the
    least common multiple over its layers.
    """
    return math.lcm(1, *(int(getattr(layer, "samples_multiple", 1))
                         for layer in _keras_internals.flatten_layers(model, include_self=True)))


def chunks(model, plan, jit_compile=False, distributions=False, values_of=None):
    """Yields the Monte Carlo outputs of a checked `plan`, one `Chunk` at a time.

    Each sample chunk's weights are drawn once and applied to every input chunk.

    Args:
        model: the Keras model `plan` was made for.
        plan: from `prepare`.
        jit_compile: XLA-compile the traced functions (on JAX they always are).
        distributions: yield the output distribution of a distribution head
            (batch [S * B, ...], sample-major) instead of the output arrays; on
            JAX one chunk per sample group (`distribution_chunks`).
        values_of: for callers that read the output arrays as parameters
            (e.g. "logits"): their name, so that a model whose output turns
            out to be a distribution layer's samples is refused, not misread.
    """
    if _backend.is_jax():
        yield from _jax_chunks(model, plan, distributions, values_of)
        return
    runner = runner_for(model, bool(jit_compile))
    x, leaves, count = plan.inputs, plan.leaves, plan.count
    t0 = 0
    for size in sample_chunks(plan.num_samples, plan.samples_per_call, plan.multiple):
        draws = runner.draw(size)
        for n0 in range(0, count, plan.batch_size):
            n1 = min(count, n0 + plan.batch_size)
            inputs = keras.tree.pack_sequence_as(x, [leaf[n0:n1] for leaf in leaves])
            if distributions:
                yield Chunk(t0, t0 + size, n0, n1, runner.call_distribution(inputs, draws, size))
                continue
            outputs = runner.call(inputs, draws, size)
            _values_only(values_of, runner.traced_distribution)
            yield Chunk(t0, t0 + size, n0, n1, keras.tree.map_structure(np.asarray, outputs))
        t0 += size


def _values_only(values_of, distribution):
    """Refuses to read a distribution layer's sampled values as `values_of`."""
    if values_of and distribution:
        raise ValueError(
            f"The model's output is a tfp_bnn distribution layer's (its values are "
            f"samples of y), not {values_of}: use output='distribution' or "
            "tfp_bnn.predict.distribution(model, x).")


def _jax_chunks(model, plan, distributions, values_of):
    """`chunks` on Keras' JAX backend: every sample chunk is one jitted call per input chunk.

    The model runs statelessly with sample t's random state (see `_jax_runner`), always
    compiled; sample t is the same network for every input chunk and every chunking.
    With `distributions`, each sample group of a call is a chunk of its own, with its
    output distribution (batch M * B, M = `plan.multiple`).
    """
    if not distributions:
        _values_only(values_of, has_distribution_head(model))
    # Imported here: it imports jax, which a TensorFlow-only install does not have.
    from tfp_bnn.predict import _jax_runner  # noqa: PLC0415

    runner = _jax_runner.runner_for(model)
    bases = runner.start()
    leaves = [np.asarray(leaf) for leaf in plan.leaves]
    # Balanced chunks differ by at most `multiple` samples: all run at the widest one's size.
    width = next(sample_chunks(plan.num_samples, plan.samples_per_call, plan.multiple))
    t0 = 0
    for size in sample_chunks(plan.num_samples, plan.samples_per_call, plan.multiple):
        for n0 in range(0, plan.count, plan.batch_size):
            n1 = min(plan.count, n0 + plan.batch_size)
            inputs = keras.tree.pack_sequence_as(plan.inputs, [leaf[n0:n1] for leaf in leaves])
            if distributions:
                groups = runner.call_distributions(inputs, bases, t0, size, width, plan.multiple)
                for g, distribution in enumerate(groups):
                    t = t0 + g * plan.multiple
                    yield Chunk(t, t + plan.multiple, n0, n1, distribution)
                continue
            outputs = runner.call(inputs, bases, t0, size, width, plan.multiple)
            _values_only(values_of, runner.traced_distribution)
            yield Chunk(t0, t0 + size, n0, n1, outputs)
        t0 += size

"""Monte Carlo forward passes on Keras' JAX backend: S samples in one compiled call.

On JAX a Keras model runs statelessly: `model.stateless_call(trainable, non_trainable,
x, training=False)` computes the forward pass from the variables' values passed in.
The random state of every `keras.random.SeedGenerator` of the model is one of those
values, a non-trainable [seed, counter] pair (`model.variables` holds it,
`model.weights` does not). Sample t of a prediction runs the model with every
generator's state replaced by `jax.random.fold_in(state, t)`, so that

- the S samples of a chunk are one `jax.vmap` of the model call over those S
  states, compiled once per chunk shape with `jax.jit`: one computation on S x B
  rows, as TensorFlow's tiled call (`tfp_bnn.predict.engine`);
- sample t is one network for every chunk of inputs, and its random numbers
  depend on t only, not on how the T samples are split into `samples_per_call`
  chunks;
- every prediction starts by advancing each generator by one step (as one
  `SeedGenerator.next()` does), so the next prediction draws new samples, while a
  model built with the same seeds repeats them.

Each mapped call runs inside `sample_trace(M)`, as TensorFlow's calls do, so every
layer sees the prediction graph it is written for (its own weight sample, no KL
term). M is 1 except for a model whose samples come in groups (a deep ensemble of
M members, `engine.sample_multiple`): then group g = samples g * M .. g * M + M - 1
is one call on the inputs tiled M times, with the states folded with g.

For a model whose output is a distribution layer's, `call_distributions` returns each
group's output distribution (TFP's JAX substrate's, a JAX pytree): `jax.vmap` stacks
every array of the distributions of a chunk, and those that are the same for every
group (a constant scale) would then broadcast against the wrong axes of the stack, so
each group's distribution is rebuilt from its own slices.
"""

import weakref

import jax
import keras
import numpy as np

from tfp_bnn._keras_internals import seed_states
from tfp_bnn.distributions.carrier import carries_distribution
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.predict.engine import output_distribution


class JaxMonteCarloRunner:
    """The jitted function that runs `model` on S Monte Carlo samples at once, on JAX.

    Args:
        model: a built Keras model (or layer); its stochastic layers draw their
            random numbers from `keras.random.SeedGenerator`s.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
    ...                           keras.layers.Dropout(0.5)])
    >>> runner = JaxMonteCarloRunner(model)
    >>> bases = runner.start()                  # the generators' states, advanced once
    >>> runner.call(np.ones((5, 3), "float32"), bases, 0, 4).shape   # samples 0..3
    (4, 5, 2)
    """

    def __init__(self, model):
        self.model = model
        self.traced_distribution = False
        self._compiled = jax.jit(self._samples,
                                 static_argnames=("positions", "multiple", "distributions"))

    def _samples(self, trainable, non_trainable, bases, indices, inputs, positions, multiple,
                 distributions=False):
        """Outputs [G * M, B, ...] of the sample groups `indices` [G] (M = `multiple`).

        Group g is samples g * M .. g * M + M - 1: one call on the inputs tiled M times
        inside `sample_trace(M)`, with every generator's state folded with g. With
        `distributions`, the list of the G groups' output distributions (batch M * B).
        """
        def tile(x):
            x = keras.ops.convert_to_tensor(x)
            return x if multiple == 1 else keras.ops.tile(x, (multiple,) + (1,) * (x.ndim - 1))

        tiled = keras.tree.map_structure(tile, inputs)

        def group(index):
            values = list(non_trainable)
            for position, base in zip(positions, bases):
                values[position] = jax.random.fold_in(base, index).astype(base.dtype)
            with sample_trace(multiple) as context:
                context.first_sample = index * multiple
                outputs, _ = self.model.stateless_call(trainable, values, tiled, training=False)
            if distributions:
                leaves, structure = jax.tree_util.tree_flatten(output_distribution(outputs))
                structures.append(structure)
                return leaves
            return outputs

        structures = []
        outputs = jax.vmap(group)(indices)
        if distributions:
            # vmap stacks each array of the distribution on a new axis 0, also the ones
            # that were the same for every group (a constant scale): one distribution of
            # the stack would broadcast those against the wrong axes. Group g's own is
            # rebuilt from the g-th slices.
            return [jax.tree_util.tree_unflatten(structures[0], [leaf[g] for leaf in outputs])
                    for g in range(indices.shape[0])]
        # Read at trace time, as on TensorFlow: a subclassed model's distribution head shows here.
        self.traced_distribution = any(carries_distribution(y)
                                       for y in keras.tree.flatten(outputs))
        # [G, M * B, ...] sample-major within a group -> [G * M, B, ...].
        return keras.tree.map_structure(
            lambda y: keras.ops.reshape(y, (-1, y.shape[1] // multiple) + tuple(y.shape[2:])),
            outputs)

    def start(self):
        """The generators' current states, each generator then advanced by one step.

        Returns:
            The base states every sample of this prediction folds its index into.
        """
        states = seed_states(self.model)
        bases = [keras.ops.convert_to_tensor(state.value) for state in states]
        for state, base in zip(states, bases):
            state.assign(base + np.array([0, 1], base.dtype))
        return bases

    def call(self, inputs, bases, t0, num_samples, width=None, multiple=1):
        """Model outputs [S, B, ...] of samples t0..t0 + S - 1 for inputs [B, ...].

        Args:
            inputs: a batch [B, ...] (or the model's input structure).
            bases: what `start()` returned for this prediction.
            t0: the index of the first sample, a multiple of `multiple`.
            num_samples: S, a multiple of `multiple`.
            width: run `width` >= S samples and keep the first S, so that chunks of
                S and S - M samples share one compilation (default S). Sample t's
                numbers do not depend on it.
            multiple: M, the samples one group of a call holds (`engine.sample_multiple`:
                a deep ensemble's members); 1 for most models.

        Returns:
            A nest of NumPy arrays [S, B, ...] shaped like the model's outputs.
        """
        outputs = self._run(inputs, bases, t0, num_samples, width, multiple, False)
        return keras.tree.map_structure(lambda y: np.asarray(y[:num_samples]), outputs)

    def call_distributions(self, inputs, bases, t0, num_samples, width=None, multiple=1):
        """The output distributions of samples t0..t0 + S - 1, one per group of M samples.

        For a model whose output is a tfp_bnn distribution layer's; arguments as `call`.

        Returns:
            A list of S / M distributions of TFP's JAX substrate, each of batch M * B
            (sample-major: row m * B + b is input b under the group's sample m).
        """
        groups = self._run(inputs, bases, t0, num_samples, width, multiple, True)
        return groups[:num_samples // multiple]

    def _run(self, inputs, bases, t0, num_samples, width, multiple, distributions):
        model = self.model
        non_trainable = model.non_trainable_variables
        ids = {id(state): k for k, state in enumerate(seed_states(model))}
        positions = tuple(k for k, v in enumerate(non_trainable) if id(v) in ids)
        ordered = [bases[ids[id(non_trainable[k])]] for k in positions]
        first = t0 // multiple
        indices = np.arange(first, first + max(num_samples, width or 0) // multiple,
                            dtype=np.uint32)
        return self._compiled([v.value for v in model.trainable_variables],
                              [v.value for v in non_trainable], ordered, indices, inputs,
                              positions=positions, multiple=multiple,
                              distributions=distributions)


_RUNNERS = weakref.WeakKeyDictionary()


def runner_for(model):
    """The model's cached `JaxMonteCarloRunner` (its compilations are reused across calls)."""
    if model not in _RUNNERS:
        _RUNNERS[model] = JaxMonteCarloRunner(model)
    return _RUNNERS[model]

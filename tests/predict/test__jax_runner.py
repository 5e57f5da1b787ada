"""The JAX Monte Carlo runner: where Keras keeps the random state, and what sample t is.

`seed_states` reads a public Keras property on either backend, so its test runs on
both (it fails loudly if Keras stops listing SeedGenerator states in `variables`);
the runner itself compiles JAX code and is checked on JAX.
"""

import keras
import numpy as np
import pytest

# The runner imports jax, an extra: without it (the floors' run) this file is skipped.
pytest.importorskip("jax", reason="the JAX runner needs the jax extra")

from tests.integration.docstring_collector import run_example  # noqa: E402
from tests.integration.docstring_collector import sandbox  # noqa: E402, F401 (a fixture)
from tfp_bnn import _backend  # noqa: E402
from tfp_bnn._keras_internals import seed_states  # noqa: E402
from tfp_bnn.predict import _jax_runner  # noqa: E402

pytestmark = pytest.mark.jax
jax_only = pytest.mark.skipif(not _backend.is_jax(), reason="the runner compiles JAX code")


class _RowNoise(keras.layers.Layer):
    def __init__(self, seed, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs):
        return inputs + keras.random.normal(keras.ops.shape(inputs), seed=self.seed_generator)


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                             keras.layers.Dropout(0.5, seed=seed + 1), _RowNoise(seed + 2),
                             keras.layers.BatchNormalization()])


def test_seed_states_are_the_generators_of_every_layer():
    model = _model()
    generators = [layer.seed_generator for layer in model.layers
                  if hasattr(layer, "seed_generator")]
    assert len(generators) == 2
    states = seed_states(model)
    # BatchNormalization's moving statistics are weights, not random state.
    assert [id(state) for state in states] == [id(g.state) for g in generators]
    deterministic = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert seed_states(deterministic) == []


class _Tracked(keras.layers.Layer):
    """Lists a metric's variables among its own state, as the variational layers' KL trackers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tracker = keras.metrics.Mean(name="tracked")

    @property
    def variables(self):
        return super().variables + self.tracker.variables

    def call(self, inputs):
        return inputs


def test_tracker_state_is_not_random_state():
    model = keras.Sequential([keras.Input((3,)), _Tracked(), _RowNoise(seed=4)])
    weights = {id(v) for v in model.weights}
    assert any(id(v) not in weights and v.name != "seed_generator_state"
               for v in model.variables), "no tracker state outside the weights to tell apart"
    assert [id(s) for s in seed_states(model)] == [
        id(model.layers[1].seed_generator.state)]


@jax_only
def test_start_advances_every_generator_once():
    model = _model()
    states = seed_states(model)
    before = [keras.ops.convert_to_numpy(state.value) for state in states]
    bases = _jax_runner.runner_for(model).start()
    for state, base, value in zip(states, bases, before):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(base), value)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(state.value),
                                      value + np.array([0, 1], value.dtype))


@jax_only
def test_sample_t_depends_on_t_only():
    model = _model()
    runner = _jax_runner.runner_for(model)
    bases = runner.start()
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
    all_six = runner.call(x, bases, 0, 6)
    assert all_six.shape == (6, 5, 4)
    np.testing.assert_array_equal(runner.call(x, bases, 2, 3), all_six[2:5])
    # A chunk run at a wider width keeps the first samples, unchanged.
    np.testing.assert_array_equal(runner.call(x, bases, 4, 2, width=5), all_six[4:6])
    assert len(np.unique(all_six.reshape(6, -1), axis=0)) == 6


@jax_only
def test_variables_are_read_at_every_call():
    model = _model()
    runner = _jax_runner.runner_for(model)
    bases = runner.start()
    x = np.zeros((2, 3), "float32")
    first = runner.call(x, bases, 0, 2)
    dense = model.layers[0]
    dense.bias.assign(dense.bias.value + 1.0)
    second = runner.call(x, bases, 0, 2)
    assert not np.allclose(first, second)


@jax_only
def test_the_runner_docstring_example_runs(sandbox):  # noqa: F811 (the fixture)
    run_example("tfp_bnn.predict._jax_runner.JaxMonteCarloRunner")

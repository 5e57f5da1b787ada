"""shuffled_epochs: each epoch's order depends on (seed, epoch) only."""

import keras
import numpy as np
import pytest

from tfp_bnn.data import shuffled_epochs
from tfp_bnn.data import steps_per_epoch

pytestmark = pytest.mark.jax


def _batches(dataset):
    return [tuple(np.asarray(t) for t in element) for element in dataset]


def test_every_epoch_is_a_permutation_in_full_batches():
    x = np.arange(10, dtype="float32")[:, None]
    y = np.arange(10) * 10
    batches = _batches(shuffled_epochs(x, y, 4, seed=3, epochs=3))
    assert len(batches) == 3 * steps_per_epoch(10, 4) == 9
    assert [len(b[0]) for b in batches] == [4, 4, 2] * 3
    epochs = [np.concatenate([b[0][:, 0] for b in batches[i:i + 3]]) for i in (0, 3, 6)]
    for order in epochs:
        assert sorted(order) == list(range(10))
    # x and y stay paired; epochs are shuffled differently.
    for xb, yb in batches:
        np.testing.assert_array_equal(xb[:, 0] * 10, yb)
    assert not np.array_equal(epochs[0], epochs[1])


def test_a_resumed_stream_repeats_the_uninterrupted_one():
    x = np.random.default_rng(0).normal(size=(50, 3)).astype("float32")
    y = np.arange(50)
    full = _batches(shuffled_epochs(x, y, 8, seed=11, epochs=5))
    rest = _batches(shuffled_epochs(x, y, 8, seed=11, epochs=5, first_epoch=3))
    per_epoch = steps_per_epoch(50, 8)
    assert len(rest) == 2 * per_epoch
    for a, b in zip(full[3 * per_epoch:], rest):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_the_seed_changes_the_order_and_x_alone_works():
    x = np.arange(30, dtype="float32")
    a = np.concatenate(list(shuffled_epochs(x, None, 30, seed=1, epochs=1)))
    b = np.concatenate(list(shuffled_epochs(x, None, 30, seed=2, epochs=1)))
    assert sorted(a) == sorted(b) == list(range(30)) and not np.array_equal(a, b)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "`batch_size`"),
    ({"batch_size": 2.5}, "`batch_size`"),
    ({"seed": -1}, "`seed`"),
    ({"epochs": 0}, "`epochs`"),
    ({"first_epoch": 3}, r"`first_epoch` \(3\) must be smaller than `epochs` \(3\)"),
    ({"y": np.zeros(4)}, "`x` has 5 rows but `y` has 4"),
    ({"x": np.zeros((0, 2)), "y": np.zeros(0)}, "`x` has no rows"),
])
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"x": np.zeros((5, 2)), "y": np.zeros(5), "batch_size": 2, "seed": 0,
                 "epochs": 3}
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        shuffled_epochs(**arguments)


def test_fit_reads_each_epochs_batches_from_one_stream():
    # Keras reads epochs 1 and 2 from one stream: a stream that ran out early
    # would stop `fit` ("ran out of data") with fewer epochs in the history.
    x = np.arange(10, dtype="float32")[:, None]
    y = np.zeros(10, dtype="float32")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    history = model.fit(shuffled_epochs(x, y, 4, seed=0, epochs=3, first_epoch=1),
                        epochs=3, initial_epoch=1, steps_per_epoch=steps_per_epoch(10, 4),
                        verbose=0)
    assert len(history.history["loss"]) == 2

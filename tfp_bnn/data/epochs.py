"""Shuffled minibatches whose order depends only on (seed, epoch): resumable training."""

import math

import numpy as np

from tfp_bnn import _backend
from tfp_bnn import _validation as check
from tfp_bnn._tf import tf


def steps_per_epoch(num_examples, batch_size):
    """Batches per epoch (the last one may be smaller).

    Args:
        num_examples: number of rows, a positive int.
        batch_size: rows per batch, a positive int.

    Returns:
        ceil(num_examples / batch_size), an int.

    Example:
    >>> steps_per_epoch(100, 32)
    4
    """
    return math.ceil(num_examples / batch_size)


def shuffled_epochs(x, y, batch_size, seed, epochs, first_epoch=0):
    """A `tf.data.Dataset` of the minibatches of epochs `first_epoch` .. `epochs - 1`.

    Epoch e visits the rows in the order of a stateless permutation keyed by
    (seed, e), so a run resumed at epoch e sees exactly the batches the
    uninterrupted run saw from epoch e on. (`fit(x, y, shuffle=True)`
    draws each epoch's order from a stateful kernel, which no checkpoint
    holds.) Pass it to `fit` with `steps_per_epoch=steps_per_epoch(len(x),
    batch_size)`, `epochs=epochs` and `initial_epoch=first_epoch`: Keras then
    keeps one iterator across epochs.

    Args:
        x: array of inputs, one row per example.
        y: array of targets with as many rows as `x`, or None for a dataset
            of inputs only.
        batch_size: rows per batch, a positive int.
        seed: non-negative int; with the epoch it fixes each epoch's order.
        epochs: total epochs of the run, a positive int.
        first_epoch: the 0-based epoch this part of the run starts at
            (default 0), smaller than `epochs`.

    Returns:
        A `tf.data.Dataset` of `(x_batch, y_batch)` tuples (of `x_batch`
        alone when `y` is None), the batches of epoch `first_epoch` first.
        On Keras' JAX backend, which runs without TensorFlow, a generator of
        the same NumPy batches, each epoch's order NumPy's permutation keyed
        by (seed, epoch): the same property, other orders than TensorFlow's
        stateless shuffle. `fit` takes either with `steps_per_epoch`.

    Example:
    >>> x = np.arange(20, dtype="float32").reshape(10, 2)
    >>> y = np.arange(10, dtype="float32")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> start = 1   # resuming: epoch 0 ran before
    >>> data = shuffled_epochs(x, y, 4, seed=0, epochs=2, first_epoch=start)
    >>> history = model.fit(data, epochs=2, initial_epoch=start, verbose=0,
    ...                     steps_per_epoch=steps_per_epoch(len(x), 4))
    >>> [len(batch_y) for _, batch_y in data]   # epoch 1's three batches
    [4, 4, 2]
    """
    batch_size, seed = check.integer("batch_size", batch_size), check.seed(seed)
    epochs = check.integer("epochs", epochs)
    first_epoch = check.integer("first_epoch", first_epoch, minimum=0)
    if first_epoch >= epochs:
        raise ValueError(f"`first_epoch` ({first_epoch}) must be smaller than `epochs` "
                         f"({epochs}).")
    x = np.asarray(x)
    num = len(x)
    if num == 0:
        raise ValueError("`x` has no rows.")
    if y is not None:
        y = np.asarray(y)
        if len(y) != num:
            raise ValueError(f"`x` has {num} rows but `y` has {len(y)}.")
    seed = int(seed) % (2**31 - 1)
    if _backend.is_jax():
        return _numpy_epochs(x, y, int(batch_size), seed, int(first_epoch), int(epochs))

    def epoch_indices(epoch):
        key = tf.stack([tf.constant(seed, tf.int64), epoch])
        order = tf.random.experimental.stateless_shuffle(tf.range(num, dtype=tf.int64),
                                                         seed=key)
        return tf.data.Dataset.from_tensor_slices(order).batch(int(batch_size))

    x_tensor = tf.constant(x)
    y_tensor = None if y is None else tf.constant(y)

    def gather(indices):
        if y_tensor is None:
            return tf.gather(x_tensor, indices)
        return tf.gather(x_tensor, indices), tf.gather(y_tensor, indices)

    data = tf.data.Dataset.range(int(first_epoch), int(epochs)).flat_map(epoch_indices)
    return data.map(gather).prefetch(2)


def _numpy_epochs(x, y, batch_size, seed, first_epoch, epochs):
    """The batches of `shuffled_epochs` on JAX, ordered by NumPy's (seed, epoch) permutation."""
    for epoch in range(first_epoch, epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(x))
        for start in range(0, len(x), batch_size):
            rows = order[start:start + batch_size]
            yield x[rows] if y is None else (x[rows], y[rows])

"""Shuffled minibatches whose order depends only on (seed, epoch): resumable training."""

import math

import numpy as np
import tensorflow as tf

from tfp_bnn import _validation as check


def steps_per_epoch(num_examples, batch_size):
    """Batches per epoch (the last one may be smaller)."""
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
        x, y: arrays with the same number of rows (y may be None).
        batch_size: positive int; seed: non-negative int.
        epochs: total epochs of the run; first_epoch: where this part starts.

    Example:
    >>> data = shuffled_epochs(x, y, 32, seed=0, epochs=100, first_epoch=start)
    >>> model.fit(data, epochs=100, initial_epoch=start,
    ...           steps_per_epoch=steps_per_epoch(len(x), 32))
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

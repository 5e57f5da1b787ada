"""Raw Monte Carlo samples of a model's outputs."""

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn.predict import engine
from tfp_bnn.predict import limits


def sample(model, x, num_samples=100, batch_size=None, samples_per_call=None,
           max_rows=engine.DEFAULT_MAX_ROWS, jit_compile=False):
    """T Monte Carlo samples of the model's outputs, without a loop of T calls.

    The T weight samples (and dropout masks) are drawn inside traced calls,
    in chunks of `samples_per_call` samples times `batch_size` inputs (see
    `tfp_bnn.predict.engine`), so memory per call stays bounded however
    large T * N is; the returned array itself holds T * N outputs.

    Args:
        model: a built Keras model with tfp_bnn stochastic layers (any other
            layers are fine; a model without stochastic layers gives T equal
            samples).
        x: inputs: an array or tensor of N examples, or a list/dict of them
            for a multi-input model.
        num_samples: T >= 1.
        batch_size: inputs per traced call (default min(N, 1024)).
        samples_per_call: weight samples per traced call (default: as many as
            keep samples_per_call * batch_size <= max_rows).
        max_rows: memory bound in tiled rows per call, used for the default
            samples_per_call.
        jit_compile: compile the traced calls with XLA (on JAX they always are).

    Returns:
        numpy array(s) of shape [T, N, ...], with the structure of the
        model's outputs. For a model ending in a distribution layer these
        are its values (samples of y by default, TFP's
        `convert_to_tensor_fn`); `tfp_bnn.predict.distribution` reads the
        distributions themselves.

    Example:
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.DenseFlipout(2)])
    >>> x_test = np.random.rand(5, 3).astype("float32")
    >>> draws = tfp_bnn.predict.sample(model, x_test, num_samples=100)
    >>> draws.shape, draws.mean(axis=0).shape   # the Monte Carlo predictive mean
    ((100, 5, 2), (5, 2))
    """
    plan = engine.prepare(model, x, num_samples, batch_size, samples_per_call, max_rows)
    what = "The Monte Carlo samples"
    limits.check_results(model, plan.num_samples, plan.count, what, dtype=np.float32)
    structure, stores = None, None
    for chunk in engine.chunks(model, plan, jit_compile=jit_compile):
        leaves = keras.tree.flatten(chunk.outputs)
        if stores is None:
            shapes = [(plan.num_samples, plan.count) + leaf.shape[2:] for leaf in leaves]
            for shape, leaf in zip(shapes, leaves):
                limits.check_storage(shape, leaf.dtype, what)
            structure = chunk.outputs
            stores = [np.empty(shape, leaf.dtype) for shape, leaf in zip(shapes, leaves)]
        for store, leaf in zip(stores, leaves):
            store[chunk.t0:chunk.t1, chunk.n0:chunk.n1] = leaf
    return keras.tree.pack_sequence_as(structure, stores)

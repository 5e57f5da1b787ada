"""Trains each variational layer twice from the same seeds; prints a JSON report.

Run by tests/integration/test_xla_and_seeds.py in its own process, because op
determinism is a process-wide switch. `twice_from_one_state` is also its zoo check's.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfp_bnn.callbacks import KLScheduler  # noqa: E402
from tfp_bnn.layers import Conv2DFlipout  # noqa: E402
from tfp_bnn.layers import Conv2DReparameterization  # noqa: E402
from tfp_bnn.layers import DenseFlipout  # noqa: E402
from tfp_bnn.layers import DenseLocalReparameterization  # noqa: E402
from tfp_bnn.layers import DenseReparameterization  # noqa: E402

DENSE = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]
CONV = [Conv2DReparameterization, Conv2DFlipout]


def build_model(cls, seed):
    """A small model around `cls`: two dense layers, or a conv layer and a head."""
    if cls in DENSE:
        return keras.Sequential([
            keras.Input((6,)),
            cls(16, activation="relu", seed=seed, prior="scale_mixture"),
            cls(2, seed=seed + 1, bayesian_bias=True),
        ])
    return keras.Sequential([
        keras.Input((8, 8, 2)),
        cls(4, 3, activation="relu", seed=seed),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(seed)),
    ])


def make_data(cls):
    """64 inputs shaped for `cls` and binary labels, from a fixed seed."""
    rng = np.random.default_rng(0)
    shape = (6,) if cls in DENSE else (8, 8, 2)
    x = rng.normal(size=(64,) + shape).astype("float32")
    return x, rng.integers(0, 2, size=64)


def twice_from_one_state(model, run):
    """(run(model), run(model)), the second from the state the first started from.

    Everything a training run reads or changes is set back in between: the
    model's variables (weights, the seed generators' states, the KL weights)
    and the optimizer's (slots and step); fit resets the metrics itself. Both
    runs call the same traced train and predict functions, so a model is built
    and traced once: any difference comes from running the same ops on the
    same values twice (float summation order, a random state that neither the
    seeds nor the model's variables hold), which is what the seeded checks
    look for. That a seed alone fixes the initial weights and the first draws
    is tested on fresh builds elsewhere: by
    test_seed_fixes_the_initial_weights_and_the_first_sample
    (tests/zoo/models/test__common.py) for every zoo model, by the seeded check
    of `tfp_bnn.testing.run_bayesian_layer_test` (tests/layers/variational/batteries.py)
    for each of these layers.
    """
    if not model.optimizer.built:  # its slots exist before the state is read
        model.optimizer.build(model.trainable_variables)
    variables = list(model.variables) + list(model.optimizer.variables)
    start = [v.numpy() for v in variables]
    first = run(model)
    for variable, value in zip(variables, start):
        variable.assign(value)
    return first, run(model)


def _compiled(cls):
    model = build_model(cls, 7)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _fit(model, x, y):
    keras.utils.set_random_seed(0)  # fit's shuffling
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[KLScheduler(64)])
    return history.history, [w.numpy() for w in model.weights], model.predict(x, verbose=0)


def main():
    tf.config.experimental.enable_op_determinism()
    report = {}
    for cls in DENSE + CONV:
        x, y = make_data(cls)
        (h1, w1, p1), (h2, w2, p2) = twice_from_one_state(_compiled(cls),
                                                          lambda model: _fit(model, x, y))
        same = h1 == h2 and all(np.array_equal(a, b) for a, b in zip(w1, w2))
        report[cls.__name__] = "identical" if same and np.array_equal(p1, p2) else "different"
    print(json.dumps(report))


if __name__ == "__main__":
    main()

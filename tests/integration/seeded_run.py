"""Trains each variational layer twice from the same seeds; prints a JSON report.

Run by tests/integration/test_xla_and_seeds.py in its own process, because op
determinism is a process-wide switch.
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


def _run(cls):
    x, y = make_data(cls)
    keras.utils.set_random_seed(0)  # fit's shuffling
    model = build_model(cls, 7)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[KLScheduler(64)])
    return history.history, [w.numpy() for w in model.weights], model.predict(x, verbose=0)


def main():
    tf.config.experimental.enable_op_determinism()
    report = {}
    for cls in DENSE + CONV:
        (h1, w1, p1), (h2, w2, p2) = _run(cls), _run(cls)
        same = h1 == h2 and all(np.array_equal(a, b) for a, b in zip(w1, w2))
        report[cls.__name__] = "identical" if same and np.array_equal(p1, p2) else "different"
    print(json.dumps(report))


if __name__ == "__main__":
    main()

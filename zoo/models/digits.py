"""Baseline classifiers of the 8x8 digits, and their training loop.

The covariate-shift comparison (`zoo.experiments.covariate_shift`) runs networks of two
shapes, each deterministic, with Flipout weight noise (Wen et al. 2018) and node-based
(`zoo.models.node_bnn`):

    MLP: Flatten -> Dense 128 relu -> Dense 128 relu -> Dense 10
         (`deterministic_mlp`; `zoo.models.flipout.flipout_mlp` and
         `zoo.models.node_bnn.node_bnn_mlp` with their classification defaults)
    CNN: Conv 16 3x3 relu (same) -> MaxPool 2x2 -> Conv 32 3x3 relu (same)
         -> Flatten (4 x 4 x 32) -> Dense 64 relu -> Dense 10
         (`deterministic_cnn`, `flipout_cnn`, `zoo.models.node_bnn.node_bnn_cnn`)

Builder arguments as in `zoo.models._common`; `DIGITS` holds the digits' input_shape, task
and num_classes. The models map [n, 8, 8, 1] images in [0, 1] to [n, 10] logits; the
variational ones minimise the per-example ELBO, mean NLL + KL / N, and `train` attaches the
`KLScheduler` that keeps kl_weight = 1/N.

A *trainer* turns data into a trained model: called as `trainer(data, epochs=, batch_size=,
seed=)`, it returns a `Trained` (model, History, details). `BuildAndTrain(builder)` is the
one-stage trainer (build, then `train`); the two-stage models of `zoo.models.posthoc` (a
trained CNN made Bayesian) are trainers too.

Example:
>>> data = tfp_bnn.data.load_digits()
>>> model = flipout_cnn(**DIGITS, num_train=len(data["x_train"]), seed=0)
>>> model(data["x_test"][:2]).shape   # logits
TensorShape([2, 10])

`train(model, data, epochs=60)` trains it as the benchmark does, and
`BuildAndTrain(flipout_cnn)(data, epochs=60, seed=0)` builds and trains it
as a trainer (its example trains a small CNN for one epoch).
"""

import collections

import keras

from tfp_bnn import _validation as check
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.modes import kl_layers
from zoo.models import _common
from zoo.models.flipout import flipout_conv
from zoo.models.flipout import flipout_dense

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 10
DIGITS = {"input_shape": INPUT_SHAPE, "task": "classification", "num_classes": NUM_CLASSES}
CNN_FILTERS = (16, 32)
CNN_KERNEL_SIZE = 3
# 8x8 -> 4x4 after the first convolution: the one downsampling an 8x8 input can afford
# before the second convolution still sees a 3x3 neighbourhood.
CNN_POOLS = 1
CNN_UNITS = (64,)
EPOCHS = 60
BATCH_SIZE = 32

Trained = collections.namedtuple("Trained", ["model", "history", "details"])
Trained.__doc__ = """What a trainer returns: the trained classifier (logits output), the
`keras.callbacks.History` of its last `fit`, and `details`, a dict of the numbers a stage
without `fit` reports (e.g. a Laplace fit's seconds and prior precision; {} for one stage)."""


def _dense(seed):
    def make(units, activation, index, name):
        return keras.layers.Dense(units, activation=activation,
                                  kernel_initializer=_common.glorot(seed, index), name=name)
    return make


def deterministic_mlp(input_shape, task="classification", num_classes=None, num_train=None,
                      seed=0, heteroscedastic=False, hidden_units=None,
                      learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """A compiled MLP of plain Dense layers, the baseline of the Bayesian MLPs.

    Args:
        num_train: accepted for the common builder signature; unused (may be None).
        others: as `zoo.models.bbb.bbb_mlp`.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, _, seed = _common.check_common(input_shape, task, num_classes, num_train,
                                                seed, needs_num_train=False)
    return _common.mlp(_dense(seed), "deterministic_mlp", input_shape, task, num_classes,
                       heteroscedastic, hidden_units, learning_rate, decay_steps)


def deterministic_cnn(input_shape, task="classification", num_classes=None, num_train=None,
                      seed=0, heteroscedastic=False, filters=CNN_FILTERS,
                      hidden_units=CNN_UNITS, learning_rate=_common.LEARNING_RATE,
                      decay_steps=None):
    """A compiled CNN: Conv 16 -> MaxPool -> Conv 32 -> Dense 64 -> head.

    Convolutions are 3x3, relu, "same" padding; only the first is followed by pooling.

    Args:
        input_shape: [height, width, channels].
        num_train: accepted for the common builder signature; unused (may be None).
        filters: the convolutions' filter counts.
        hidden_units: widths of the hidden Dense layers.
        others: as `zoo.models.bbb.bbb_mlp`.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, _, seed = _common.check_common(input_shape, task, num_classes, num_train,
                                                seed, needs_num_train=False)

    def conv(count, kernel_size, index, name):
        return keras.layers.Conv2D(count, kernel_size, padding="same", activation="relu",
                                   data_format=_common.IMAGE_DATA_FORMAT,
                                   kernel_initializer=_common.glorot(seed, index), name=name)
    return _common.convnet(conv, _dense(seed), "deterministic_cnn", input_shape, task,
                           num_classes, heteroscedastic, filters, CNN_KERNEL_SIZE, CNN_POOLS,
                           hidden_units, learning_rate, decay_steps)


def flipout_cnn(input_shape, task="classification", num_classes=None, num_train=None, seed=0,
                heteroscedastic=False, filters=CNN_FILTERS, hidden_units=CNN_UNITS, prior=None,
                posterior=None, learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """The CNN of `deterministic_cnn` with `Conv2DFlipout` and `DenseFlipout` layers.

    Args:
        num_train: N, the number of training examples: kl_weight = 1/N.
        prior, posterior: as `zoo.models.flipout.flipout_mlp`.
        others: as `deterministic_cnn`.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    return _common.convnet(
        flipout_conv(num_train, prior, posterior, seed),
        flipout_dense(num_train, prior, posterior, seed), "flipout_cnn", input_shape, task,
        num_classes, heteroscedastic, filters, CNN_KERNEL_SIZE, CNN_POOLS, hidden_units,
        learning_rate, decay_steps)


def train(model, data, epochs=EPOCHS, batch_size=BATCH_SIZE, seed=0, verbose=0, callbacks=()):
    """Fits `model` on data["x_train"], data["y_train"]; returns the History.

    A model with KL-carrying layers (variational or node-based) trains with
    `KLScheduler(num_examples=len(x_train))`, so its loss is the per-example ELBO mean NLL +
    KL / N whatever kl_weight it was built with.

    Args:
        model: a compiled Keras model.
        data: dict with `x_train` and `y_train` (as `load_digits` returns).
        epochs: positive int.
        batch_size: positive int.
        seed: int >= 0; seeds Python, NumPy and TensorFlow (the minibatch order of `fit`
            included) before training.
        verbose: passed to `fit`.
        callbacks: more Keras callbacks for `fit` (e.g. `tfp_bnn.callbacks.SWAG`).

    Returns:
        The `keras.callbacks.History` of `fit`.
    """
    epochs = check.integer("epochs", epochs)
    batch_size = check.integer("batch_size", batch_size)
    seed = check.seed(seed)
    for key in ("x_train", "y_train"):
        if key not in data:
            raise ValueError(f"`data` needs the key {key!r}; it has {sorted(data)}.")
    x_train, y_train = data["x_train"], data["y_train"]
    keras.utils.set_random_seed(seed)
    callbacks = list(callbacks)
    if kl_layers(model):
        callbacks.append(KLScheduler(num_examples=len(x_train)))
    return model.fit(x_train, y_train, epochs=epochs, batch_size=batch_size,
                     callbacks=callbacks, verbose=verbose)


class BuildAndTrain:
    """The one-stage trainer: `builder(**DIGITS, num_train=N, seed=seed, **overrides)`, then
    `train`.

    Args:
        builder: a digits builder of the common signature (`zoo.models._common`).
        **overrides: more builder arguments (filters, hidden_units, ...).

    Call arguments:
        data: dict with `x_train` and `y_train` (as `load_digits` returns); N is their length.
        epochs, batch_size, seed: as `train` (the seed also seeds the builder).

    Returns:
        A `Trained` with `details` = {}.

    Example:
    >>> data = tfp_bnn.data.load_digits()
    >>> small = {key: values[:64] for key, values in data.items()}
    >>> trainer = BuildAndTrain(deterministic_cnn, filters=(4, 8), hidden_units=(16,))
    >>> trained = trainer(small, epochs=1, seed=0)
    >>> trained.model.output.shape, trained.details   # logits
    ((None, 10), {})
    """

    def __init__(self, builder, **overrides):
        if not callable(builder):
            raise TypeError(f"`builder` must be a callable, got {builder!r}.")
        self.builder = builder
        self.overrides = overrides

    def __call__(self, data, epochs=EPOCHS, batch_size=BATCH_SIZE, seed=0):
        if "x_train" not in data:
            raise ValueError(f"`data` needs the key 'x_train'; it has {sorted(data)}.")
        model = self.builder(**DIGITS, num_train=len(data["x_train"]), seed=seed,
                             **self.overrides)
        history = train(model, data, epochs=epochs, batch_size=batch_size, seed=seed)
        return Trained(model, history, {})

    def __repr__(self):
        name = getattr(self.builder, "__name__", repr(self.builder))
        return f"BuildAndTrain({name})"

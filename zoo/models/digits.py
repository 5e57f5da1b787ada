"""Baseline classifiers of the 8x8 digits, and their training loop.

Two architectures, each deterministic and with Flipout weight noise (Wen et
al. 2018) in every layer; the node-BNN models of the covariate-shift
comparison (`zoo.experiments.covariate_shift`) have the same sizes:

    MLP: Flatten -> Dense 128 relu -> Dense 128 relu -> Dense 10
    CNN: Conv 16 3x3 relu (same) -> MaxPool 2x2 -> Conv 32 3x3 relu (same)
         -> Flatten (4 x 4 x 32) -> Dense 64 relu -> Dense 10

Every builder is called as `builder(num_train=N, seed=S)` (other arguments
have defaults) and returns a model compiled with Adam and
SparseCategoricalCrossentropy(from_logits=True), mapping [n, 8, 8, 1]
images in [0, 1] to [n, 10] logits. The variational models minimise the
per-example ELBO, mean NLL + KL / N; `train` attaches the `KLScheduler`
that keeps kl_weight = 1/N.

Example:
>>> data = tfp_bnn.data.load_digits()
>>> model = flipout_cnn(num_train=len(data["x_train"]), seed=0)
>>> history = train(model, data, epochs=60)
"""

import math

import keras

from tfp_bnn import layers as bnn_layers
from tfp_bnn import posteriors
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.modes import kl_layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 10
MLP_UNITS = (128, 128)
CNN_FILTERS = (16, 32)
CNN_DENSE_UNITS = 64
LEARNING_RATE = 1e-3
EPOCHS = 60
BATCH_SIZE = 32


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def _check_common(num_train, learning_rate, seed):
    if num_train is not None:
        _positive_int("num_train", num_train)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    learning_rate = float(learning_rate)
    if not math.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be a finite number > 0, got {learning_rate!r}.")
    return learning_rate


def _compile(model, learning_rate):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _glorot(seed, index):
    # Stride 10 per layer, as zoo.models.bbb: one stream per layer and seed.
    return keras.initializers.GlorotUniform(seed=1000 * seed + 10 * index)


def _flipout_kwargs(num_train, prior, posterior, seed, index):
    """Arguments shared by the Flipout layers of one model."""
    return {
        # None until `train`'s KLScheduler assigns 1/N; given num_train the
        # model is also right under a plain `fit`.
        "kl_weight": None if num_train is None else 1.0 / num_train,
        "prior": prior,
        "posterior": posteriors.MeanFieldNormal() if posterior is None else posterior,
        "seed": 1000 * seed + 10 * index,
    }


def deterministic_mlp(num_train=None, hidden_units=MLP_UNITS, learning_rate=LEARNING_RATE,
                      seed=0):
    """A compiled MLP: Flatten -> Dense 128 relu -> Dense 128 relu -> Dense 10.

    Args:
        num_train: accepted for the common builder signature; unused.
        hidden_units: widths of the hidden layers.
        learning_rate: Adam's learning rate.
        seed: int >= 0; seeds the initial weights.

    Returns:
        A compiled `keras.Model` from [n, 8, 8, 1] images to [n, 10] logits.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)
    hidden_units = tuple(_positive_int("hidden_units", units) for units in hidden_units)
    inputs = keras.Input(shape=INPUT_SHAPE, name="image")
    hidden = keras.layers.Flatten()(inputs)
    for index, units in enumerate(hidden_units):
        hidden = keras.layers.Dense(units, activation="relu", kernel_initializer=_glorot(
            seed, index), name=f"dense_{index}")(hidden)
    outputs = keras.layers.Dense(NUM_CLASSES, kernel_initializer=_glorot(
        seed, len(hidden_units)), name="logits")(hidden)
    return _compile(keras.Model(inputs, outputs, name="deterministic_mlp"), learning_rate)


def flipout_mlp(num_train=None, hidden_units=MLP_UNITS, prior=None, posterior=None,
                learning_rate=LEARNING_RATE, seed=0):
    """The MLP of `deterministic_mlp` with a `DenseFlipout` for every Dense.

    Args:
        num_train: N, the number of training examples: kl_weight = 1/N. None
            leaves the weight to a `KLScheduler` (as `train` attaches).
        hidden_units: widths of the hidden layers.
        prior: a `tfp_bnn.priors.Prior` for every weight; None for N(0, 1).
        posterior: a location-scale `tfp_bnn.posteriors.Posterior`; None for
            `MeanFieldNormal()` (sigma ~= 0.05 at the start).
        learning_rate: Adam's learning rate.
        seed: int >= 0; seeds the initial weights and the weight noise.

    Returns:
        A compiled `keras.Model` from [n, 8, 8, 1] images to [n, 10] logits.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)
    hidden_units = tuple(_positive_int("hidden_units", units) for units in hidden_units)
    inputs = keras.Input(shape=INPUT_SHAPE, name="image")
    hidden = keras.layers.Flatten()(inputs)
    for index, units in enumerate(hidden_units):
        hidden = bnn_layers.DenseFlipout(
            units, activation="relu", name=f"dense_{index}",
            **_flipout_kwargs(num_train, prior, posterior, seed, index))(hidden)
    outputs = bnn_layers.DenseFlipout(
        NUM_CLASSES, name="logits",
        **_flipout_kwargs(num_train, prior, posterior, seed, len(hidden_units)))(hidden)
    return _compile(keras.Model(inputs, outputs, name="flipout_mlp"), learning_rate)


def _cnn(conv, dense, filters, dense_units, name):
    """Conv 3x3 -> MaxPool 2 -> Conv 3x3 -> Flatten -> Dense -> logits.

    `conv(filters, index)` and `dense(units, index, activation)` make the layers.
    """
    if len(filters) != 2:
        raise ValueError(f"`filters` must hold the two convolutions' filter counts, got "
                         f"{filters!r}.")
    first, second = (_positive_int("filters", value) for value in filters)
    dense_units = _positive_int("dense_units", dense_units)
    inputs = keras.Input(shape=INPUT_SHAPE, name="image")
    hidden = conv(first, 0)(inputs)
    # 8x8 -> 4x4: the one downsampling an 8x8 input can afford before the
    # second convolution still sees a 3x3 neighbourhood.
    hidden = keras.layers.MaxPooling2D(2, name="pool")(hidden)
    hidden = conv(second, 1)(hidden)
    hidden = keras.layers.Flatten()(hidden)
    hidden = dense(dense_units, 2, "relu")(hidden)
    outputs = dense(NUM_CLASSES, 3, None)(hidden)
    return keras.Model(inputs, outputs, name=name)


def deterministic_cnn(num_train=None, filters=CNN_FILTERS, dense_units=CNN_DENSE_UNITS,
                      learning_rate=LEARNING_RATE, seed=0):
    """A compiled CNN: Conv 16 -> MaxPool -> Conv 32 -> Dense 64 -> Dense 10.

    Convolutions are 3x3, relu, "same" padding.

    Args:
        num_train: accepted for the common builder signature; unused.
        filters: the two convolutions' filter counts.
        dense_units: width of the hidden Dense layer.
        learning_rate: Adam's learning rate.
        seed: int >= 0; seeds the initial weights.

    Returns:
        A compiled `keras.Model` from [n, 8, 8, 1] images to [n, 10] logits.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)

    def conv(count, index):
        return keras.layers.Conv2D(count, 3, padding="same", activation="relu",
                                   kernel_initializer=_glorot(seed, index), name=f"conv_{index}")

    def dense(units, index, activation):
        return keras.layers.Dense(units, activation=activation,
                                  kernel_initializer=_glorot(seed, index),
                                  name="logits" if activation is None else f"dense_{index}")

    model = _cnn(conv, dense, tuple(filters), dense_units, "deterministic_cnn")
    return _compile(model, learning_rate)


def flipout_cnn(num_train=None, filters=CNN_FILTERS, dense_units=CNN_DENSE_UNITS, prior=None,
                posterior=None, learning_rate=LEARNING_RATE, seed=0):
    """The CNN of `deterministic_cnn` with `Conv2DFlipout` and `DenseFlipout` layers.

    Args:
        num_train: N, the number of training examples: kl_weight = 1/N. None
            leaves the weight to a `KLScheduler` (as `train` attaches).
        filters: the two convolutions' filter counts.
        dense_units: width of the hidden Dense layer.
        prior: a `tfp_bnn.priors.Prior` for every weight; None for N(0, 1).
        posterior: a location-scale `tfp_bnn.posteriors.Posterior`; None for
            `MeanFieldNormal()` (sigma ~= 0.05 at the start).
        learning_rate: Adam's learning rate.
        seed: int >= 0; seeds the initial weights and the weight noise.

    Returns:
        A compiled `keras.Model` from [n, 8, 8, 1] images to [n, 10] logits.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)

    def conv(count, index):
        return bnn_layers.Conv2DFlipout(
            count, 3, padding="same", activation="relu", name=f"conv_{index}",
            **_flipout_kwargs(num_train, prior, posterior, seed, index))

    def dense(units, index, activation):
        return bnn_layers.DenseFlipout(
            units, activation=activation,
            name="logits" if activation is None else f"dense_{index}",
            **_flipout_kwargs(num_train, prior, posterior, seed, index))

    model = _cnn(conv, dense, tuple(filters), dense_units, "flipout_cnn")
    return _compile(model, learning_rate)


def train(model, data, epochs=EPOCHS, batch_size=BATCH_SIZE, seed=0, verbose=0):
    """Fits `model` on data["x_train"], data["y_train"]; returns the History.

    A model with KL-carrying layers (variational or node-based) trains with
    `KLScheduler(num_examples=len(x_train))`, so its loss is the per-example
    ELBO mean NLL + KL / N whatever kl_weight it was built with.

    Args:
        model: a compiled Keras model.
        data: dict with `x_train` and `y_train` (as `load_digits` returns).
        epochs: positive int.
        batch_size: positive int.
        seed: int >= 0; seeds Python, NumPy and TensorFlow (the minibatch
            order of `fit` included) before training.
        verbose: passed to `fit`.

    Returns:
        The `keras.callbacks.History` of `fit`.
    """
    epochs = _positive_int("epochs", epochs)
    batch_size = _positive_int("batch_size", batch_size)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    for key in ("x_train", "y_train"):
        if key not in data:
            raise ValueError(f"`data` needs the key {key!r}; it has {sorted(data)}.")
    x_train, y_train = data["x_train"], data["y_train"]
    keras.utils.set_random_seed(seed)
    callbacks = []
    if kl_layers(model):
        callbacks.append(KLScheduler(num_examples=len(x_train)))
    return model.fit(x_train, y_train, epochs=epochs, batch_size=batch_size,
                     callbacks=callbacks, verbose=verbose)

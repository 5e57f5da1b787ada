"""What the model families share: the common arguments, the compile step, the head and the MLP.

Every builder of `zoo.models` is called as

    builder(input_shape, task=..., num_classes=None, num_train=N, seed=0, **options)

and returns a compiled `keras.Model`:

- task="regression": outputs [batch, 2] = [mean, s = log noise variance] of a standardised
  target, compiled with `tfp_bnn.losses.GaussianNLL`. Plain models learn one s for all inputs
  (`tfp_bnn.layers.HomoscedasticNoise`); heteroscedastic ones predict s from x (Kendall and
  Gal 2017).
- task="classification": [batch, num_classes] logits, compiled with
  SparseCategoricalCrossentropy(from_logits=True) and accuracy.

Layer i of a model built with seed S draws from seed 1000 S + 10 i: a layer uses a few
consecutive seeds (kernel, scale, bias), so a stride of 10 keeps the layers of one model on
distinct streams.
"""

import itertools
import math

import keras

from tfp_bnn import _validation as check
from tfp_bnn import layers as bnn_layers
from tfp_bnn.losses import GaussianNLL
from zoo.models import limits

TASKS = ("regression", "classification")
# Hernandez-Lobato and Adams (2015), Gal and Ghahramani (2016): one hidden layer of 50 units
# for the UCI tables; two of 128 for images and classes.
REGRESSION_UNITS = (50,)
CLASSIFICATION_UNITS = (128, 128)
LEARNING_RATE = 1e-3
# Image inputs are [height, width, channels] whatever keras.config.image_data_format() says:
# the convolutions, poolings and Flatten layers pin it (channels_first would read the height
# as channels, and Flatten would reorder the features).
IMAGE_DATA_FORMAT = "channels_last"


def sizes(name, values):
    """A non-empty sequence of positive ints (layer widths, filter counts) as a tuple of ints."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"`{name}` must be a sequence of positive ints, got {values!r}.")
    return check.integers(name, values)


def layer_sizes(name, values):
    """`sizes`, each at most `zoo.models.limits.MAX_UNITS`."""
    values = sizes(name, values)
    limits.check_sizes(name, values)
    return values


def check_common(input_shape, task, num_classes, num_train, seed, needs_num_train=True):
    """Validates the arguments every builder takes.

    `num_train` may be None only for a model without a KL term (`needs_num_train=False`).

    Returns:
        (input_shape as a tuple of ints, num_train, seed) as Python ints.
    """
    try:
        input_shape = sizes("input_shape", input_shape)
    except ValueError:  # the whole shape is what the caller needs to see
        raise ValueError("`input_shape` must be a non-empty tuple of positive ints, got "
                         f"{input_shape!r}.") from None
    check.one_of("task", task, TASKS)
    if task == "classification":
        check.integer("num_classes", num_classes, minimum=2)
    elif num_classes is not None:
        raise ValueError(f"`num_classes` is only for classification, got {num_classes!r}.")
    num_train = check.integer("num_train", num_train, allow_none=not needs_num_train)
    return input_shape, num_train, check.seed(seed)


def layer_seed(seed, index):
    """The seed of layer `index` of a model built with `seed`."""
    return 1000 * seed + 10 * index


def glorot(seed, index):
    """A seeded Glorot-uniform initializer for layer `index`."""
    return keras.initializers.GlorotUniform(seed=layer_seed(seed, index))


def dense_weights(fan_in, units):
    """Weights of a Dense layer: kernel and bias."""
    return (fan_in + 1) * units


def optimizer(learning_rate, decay_steps):
    """Adam; with `decay_steps`, a cosine decay of the learning rate to 10% of its start."""
    learning_rate = check.positive("learning_rate", learning_rate)
    if decay_steps is not None:
        learning_rate = keras.optimizers.schedules.CosineDecay(
            learning_rate, check.integer("decay_steps", decay_steps), alpha=0.1)
    return keras.optimizers.Adam(learning_rate=learning_rate)


def compile_model(model, task, learning_rate, decay_steps, loss=None):
    """Compiles `model` for `task` (see the module docstring); returns it."""
    if task == "classification":
        # The metric as an object and the optimizer built here: Keras would create both
        # sets of variables inside the first traced train step and trace it again.
        model.compile(optimizer=optimizer(learning_rate, decay_steps),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    else:
        model.compile(optimizer=optimizer(learning_rate, decay_steps),
                      loss=GaussianNLL() if loss is None else loss)
    return build_optimizer(model)


def build_optimizer(model):
    """Creates the optimizer's slots now, so that `fit` traces its step once; returns model."""
    model.optimizer.build(model.trainable_variables)
    return model


def indexed(make_dense, start=0, before_dense=None):
    """`dense(units, activation, name)` making layer `start`, `start + 1`, ... in turn.

    `make_dense(units, activation, index, name)` makes one layer; `before_dense(index)`, if
    given, makes a layer applied to the input of each (MC dropout's).
    """
    count = itertools.count(start)

    def dense(units, activation, name):
        index = next(count)
        layer = make_dense(units, activation, index, name)
        if before_dense is None:
            return layer
        drop = before_dense(index)
        return lambda tensor: layer(drop(tensor))
    return dense


def tower(dense, hidden, hidden_units, task, num_classes, heteroscedastic):
    """Hidden Dense relu layers, then the output: logits, [mean, learned s] or [mean, s(x)]."""
    for position, units in enumerate(hidden_units):
        hidden = dense(units, "relu", f"dense_{position}")(hidden)
    if task == "classification":
        return dense(num_classes, None, "logits")(hidden)
    if heteroscedastic:
        return dense(2, None, "mean_log_variance")(hidden)
    mean = dense(1, None, "mean")(hidden)
    return bnn_layers.HomoscedasticNoise(name="noise")(mean)


def output_units(task, num_classes, heteroscedastic):
    """Units of the last layer for `task`."""
    return num_classes if task == "classification" else 2 if heteroscedastic else 1


def mlp(make_dense, name, input_shape, task, num_classes, heteroscedastic, hidden_units,
        learning_rate, decay_steps, before_dense=None, layer_weights=dense_weights):
    """Input -> [Flatten] -> hidden Dense layers -> head, compiled.

    `layer_weights(fan_in, units)` estimates a layer's weights; their sum is checked against
    `zoo.models.limits.MAX_PARAMETERS` before any layer is made. `hidden_units=None` takes
    `REGRESSION_UNITS` or `CLASSIFICATION_UNITS`.
    """
    if hidden_units is None:
        hidden_units = REGRESSION_UNITS if task == "regression" else CLASSIFICATION_UNITS
    hidden_units = layer_sizes("hidden_units", hidden_units)
    widths = ((math.prod(input_shape),) + hidden_units
              + (output_units(task, num_classes, heteroscedastic),))
    limits.check_parameter_count(
        name, sum(layer_weights(a, b) for a, b in zip(widths[:-1], widths[1:])),
        f"input_shape {input_shape} and hidden_units {list(hidden_units)}")
    inputs = keras.Input(shape=input_shape, name="inputs")
    hidden = inputs
    if len(input_shape) > 1:
        hidden = keras.layers.Flatten(data_format=IMAGE_DATA_FORMAT, name="flatten")(hidden)
    outputs = tower(indexed(make_dense, before_dense=before_dense), hidden, hidden_units, task,
                    num_classes, heteroscedastic)
    return compile_model(keras.Model(inputs, outputs, name=name), task, learning_rate,
                         decay_steps)


def convnet(make_conv, make_dense, name, input_shape, task, num_classes, heteroscedastic,
            filters, kernel_size, pools, hidden_units, learning_rate, decay_steps):
    """Image -> convolutions -> Flatten -> hidden Dense layers -> head, compiled.

    `make_conv(filters, kernel_size, index, name)` makes convolution `index` ("same"
    padding, `IMAGE_DATA_FORMAT`); each of the first `pools` is followed by 2x2 max pooling
    ("same": odd sides round up; None: all). The Dense layers continue the layer index after
    the convolutions.
    """
    if len(input_shape) != 3:
        raise ValueError(f"{name} needs image inputs [height, width, channels], got "
                         f"input_shape {input_shape}.")
    filters = layer_sizes("filters", filters)
    hidden_units = layer_sizes("hidden_units", hidden_units)
    pools = len(filters) if pools is None else min(pools, len(filters))
    channels = (input_shape[2],) + filters
    side = 2 ** pools
    widths = ((math.ceil(input_shape[0] / side) * math.ceil(input_shape[1] / side)
               * filters[-1],) + hidden_units + (output_units(task, num_classes, heteroscedastic),))
    limits.check_parameter_count(
        name, sum(dense_weights(kernel_size**2 * a, b) for a, b in zip(channels[:-1], channels[1:]))
        + sum(dense_weights(a, b) for a, b in zip(widths[:-1], widths[1:])),
        f"input_shape {input_shape}, filters {list(filters)} and hidden_units "
        f"{list(hidden_units)}")
    inputs = keras.Input(shape=input_shape, name="inputs")
    hidden = inputs
    for index, count in enumerate(filters):
        hidden = make_conv(count, kernel_size, index, f"conv_{index}")(hidden)
        if index < pools:
            hidden = keras.layers.MaxPooling2D(2, padding="same", data_format=IMAGE_DATA_FORMAT,
                                               name=f"pool_{index}")(hidden)
    hidden = keras.layers.Flatten(data_format=IMAGE_DATA_FORMAT, name="flatten")(hidden)
    outputs = tower(indexed(make_dense, start=len(filters)), hidden, hidden_units, task,
                    num_classes, heteroscedastic)
    return compile_model(keras.Model(inputs, outputs, name=name), task, learning_rate,
                         decay_steps)

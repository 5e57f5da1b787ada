"""MC dropout (Gal and Ghahramani 2016): the `mc_dropout_mlp` family.

Builder arguments as in `zoo.models._common`.

Example:
>>> model = mc_dropout_mlp((8,), num_train=927)
>>> model.output.shape
(None, 2)
"""

import math

import keras

from tfp_bnn import _validation as check
from tfp_bnn import layers as bnn_layers
from tfp_bnn import mc_dropout
from zoo.models import _common

# Gal and Ghahramani (2016), UCI experiments: p from {0.005, 0.01, 0.05, 0.1}, prior
# length-scale l = 1e-2.
RATE = 0.05
LENGTH_SCALE = 1e-2


def mc_dropout_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                   heteroscedastic=False, hidden_units=None, rate=RATE,
                   length_scale=LENGTH_SCALE, learning_rate=_common.LEARNING_RATE,
                   decay_steps=None):
    """A compiled MLP with `MCDropout` before every Dense layer.

    As in Gal and Ghahramani's UCI code the inputs are dropped too. The L2 factor on the
    weights after each dropout layer is l^2 (1 - p) / (2 N) (their KL term per example; the
    noise precision tau is learned with the rest rather than set by grid search).

    Args:
        input_shape, task, num_classes, num_train, seed, heteroscedastic, hidden_units,
            learning_rate, decay_steps: as `zoo.models.bbb.bbb_mlp`.
        rate: dropout probability p in [0, 1).
        length_scale: prior length-scale l > 0.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    rate = check.number("rate", rate, low=0.0, high=1.0, high_open=True)
    length_scale = check.positive("length_scale", length_scale)
    if not math.isfinite(length_scale * length_scale):
        raise ValueError("`length_scale` must be a finite number > 0 whose square is finite, "
                         f"got {length_scale!r}.")
    decay = mc_dropout.weight_decay(length_scale, rate, num_train, 1.0)

    def make(units, activation, index, name):
        return keras.layers.Dense(
            units, activation=activation, kernel_regularizer=keras.regularizers.L2(decay),
            kernel_initializer=_common.glorot(seed, index), name=name)

    def dropout(index):
        return bnn_layers.MCDropout(rate, seed=_common.layer_seed(seed, index) + 5,
                                    name=f"dropout_{index}")
    name = "mc_dropout_mlp_heteroscedastic" if heteroscedastic else "mc_dropout_mlp"
    return _common.mlp(make, name, input_shape, task, num_classes, heteroscedastic,
                       hidden_units, learning_rate, decay_steps, before_dense=dropout)

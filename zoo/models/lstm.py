"""A Bayesian LSTM forecaster: `bayesian_lstm_forecaster`.

A window of the past `window` steps ([window, features]) runs through
`keras.layers.RNN(tfp_bnn.layers.LSTMCellReparameterization(units))`: the
cell's kernel, recurrent kernel and bias are drawn once per pass and reused
at every step, and their KL enters the loss once per pass (Fortunato et al.
2017, "Bayesian Recurrent Neural Networks", sec. 3). The last output goes to
a Bayesian Dense head (`DenseReparameterization` with a Bayesian bias, as
the transformer forecaster's) and a learned homoscedastic noise variance
that starts where the transformer's does (`zoo.models.transformer.
INITIAL_LOG_NOISE`). Outputs [mean, s = log noise variance], loss
`tfp_bnn.losses.GaussianNLL` (the transformer's Monte Carlo path scores the
same [mean, log variance] with `MomentGaussianNLL("diagonal")`, the same
Gaussian NLL), KL / N with kl_weight = 1 / N from the start (then set by
`tfp_bnn.callbacks.KLScheduler` in `zoo.run.scoring.fit`). Prediction is
Monte Carlo: `tfp_bnn.predict.regression` draws T weight samples.

Example:
>>> model = bayesian_lstm_forecaster((24, 1), num_train=2556, units=32)
>>> model.output.shape   # [batch, 2]: mean, log noise variance
(None, 2)
"""

import keras

from tfp_bnn import _validation as check
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import HomoscedasticNoise
from tfp_bnn.layers import LSTMCellReparameterization
from zoo.models import _common
from zoo.models import limits
from zoo.models.transformer import INITIAL_LOG_NOISE

UNITS = 32


def lstm_weights(features, units):
    """Weights of an LSTM cell (4 gates: kernel, recurrent kernel, bias) and its Dense head."""
    return 4 * units * (features + units + 1) + _common.dense_weights(units, 1)


def bayesian_lstm_forecaster(input_shape, task="regression", num_classes=None, num_train=None,
                             seed=0, units=UNITS, learning_rate=_common.LEARNING_RATE,
                             decay_steps=None):
    """A compiled Bayesian LSTM that forecasts the next value of a window.

    Args:
        input_shape: (window, features), e.g. (24, 1) for 24 past months of one
            series.
        task: "regression" only (the model predicts a mean and a noise variance).
        num_classes: None (regression).
        num_train: N, the number of training windows (kl_weight = 1 / N).
        seed: int >= 0: the cell's and the head's initial weights and noise.
        units: positive int, the LSTM's state size.
        learning_rate, decay_steps: Adam's, as in `zoo.models._common.optimizer`.

    Returns:
        A compiled functional `keras.Model`, outputs [batch, 2] = [mean, s] of the
        standardised target.

    Raises:
        ValueError: naming the argument, for a shape that is not (window,
            features), a task other than regression, a bad `units` or a common
            argument out of range (`zoo.models._common.check_common`).

    Example:
    >>> model = bayesian_lstm_forecaster((6, 1), num_train=2556, units=4, seed=0)
    >>> windows = np.random.rand(3, 6, 1).astype("float32")
    >>> model(windows).shape   # one weight sample: [mean, log noise variance]
    TensorShape([3, 2])

    `tfp_bnn.predict.regression(model, windows, num_samples=100)` gives the
    predictive distribution.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    if task != "regression":
        raise ValueError("bayesian_lstm_forecaster is a regression model (it predicts a mean "
                         f"and a variance per window), got task {task!r}.")
    if len(input_shape) != 2:
        raise ValueError("bayesian_lstm_forecaster reads windows [steps, features], e.g. "
                         f"(24, 1), got input_shape {input_shape}.")
    units = check.integer("units", units)
    limits.check_sizes("units", units)
    limits.check_parameter_count(
        "bayesian_lstm_forecaster", lstm_weights(input_shape[1], units),
        f"{input_shape[1]} features and {units} units")
    inputs = keras.Input(shape=input_shape, name="inputs")
    cell = LSTMCellReparameterization(units, kl_weight=1.0 / num_train,
                                      seed=_common.layer_seed(seed, 0), name="lstm_cell")
    hidden = keras.layers.RNN(cell, name="lstm")(inputs)
    mean = DenseReparameterization(1, bayesian_bias=True, kl_weight=1.0 / num_train,
                                   seed=_common.layer_seed(seed, 1), name="mean")(hidden)
    outputs = HomoscedasticNoise(initial_log_variance=INITIAL_LOG_NOISE, name="noise")(mean)
    model = keras.Model(inputs, outputs, name="bayesian_lstm_forecaster")
    return _common.compile_model(model, task, learning_rate, decay_steps)

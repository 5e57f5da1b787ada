"""LSTM cell with variational weights, one weight sample per sequence pass."""

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.posteriors import seeded_initializer
from tfp_bnn.layers._recurrent_cell import BayesianRNNCellBase


class _ForgetGateBias(keras.initializers.Initializer):
    """`inner` for the input, cell and output gates, ones for the forget gate (build only)."""

    def __init__(self, inner, units):
        self.inner = inner
        self.units = units

    def __call__(self, shape, dtype=None):
        units = self.units
        return ops.concatenate([self.inner((units,), dtype=dtype),
                                ops.ones((units,), dtype=dtype),
                                self.inner((2 * units,), dtype=dtype)])


@keras.saving.register_keras_serializable(package="tfp_bnn")
class LSTMCellReparameterization(BayesianRNNCellBase):
    """Long short-term memory cell whose weights are drawn once per sequence.

    The Bayesian counterpart of `keras.layers.LSTMCell` (Hochreiter &
    Schmidhuber, 1997): the same gates i, f, c, o in Keras's order and weight
    layout,

        z = x @ W + h_{t-1} @ U + b,   (i, f, g, o) = split(z, 4)
        c_t = sig(f) * c_{t-1} + sig(i) * tanh(g),   h_t = sig(o) * tanh(c_t)

    with W (kernel), U (recurrent kernel) and optionally b under posteriors
    q(W), q(U), q(b). Use it in `keras.layers.RNN`: W, U, b are sampled once
    per sequence and reused at every step (Fortunato et al., 2017,
    "Bayesian Recurrent Neural Networks", arXiv:1704.02798, sec. 3, without
    their posterior sharpening), and kl_weight * KL(q || p) enters the loss
    once per pass however many steps (see `tfp_bnn/layers/_recurrent_cell.py`).
    With the posterior collapsed to its mean (`tfp_bnn.set_mean_mode`) the cell
    computes what `keras.layers.LSTMCell` computes with W, U, b = the means.

    Deviation from `keras.layers.LSTMCell`: no `implementation` argument;
    dropout uses one mask for all gates (Keras's default implementation).

    Args:
        units: positive int, dimensionality of the output space.
        unit_forget_bias: if True, the forget gate's bias starts at 1
            (Jozefowicz et al., 2015), as in Keras.
        **kwargs: every other argument of `keras.layers.LSTMCell`
            (activation, recurrent_activation, use_bias, kernel_initializer,
            recurrent_initializer, bias_initializer, *_regularizer,
            *_constraint, dropout, recurrent_dropout) plus `posterior`,
            `prior`, `kl_weight`, `kl_estimator`, `bayesian_bias`, `seed`
            (see `tfp_bnn.layers.BayesianLayer`). The initializers,
            regularizers and constraints apply to the posterior means.

    Call arguments:
        inputs: [batch, features], one timestep.
        states: [h, c], each [batch, units].
        training: True draws noise (always); at inference the cell samples
            unless mean mode is on.

    Returns:
        (h, [h, c]).

    Example:
    >>> layer = keras.layers.RNN(LSTMCellReparameterization(32), return_sequences=True)
    """

    gates = 4

    def __init__(self, units, unit_forget_bias=True, **kwargs):
        super().__init__(units, **kwargs)
        self.unit_forget_bias = _validation.boolean("unit_forget_bias", unit_forget_bias)
        self.state_size = [self.units, self.units]

    def build(self, input_shape):
        if not (self.unit_forget_bias and self.use_bias):
            return super().build(input_shape)
        # `_build_weights` reads `bias_initializer`; the config keeps the user's.
        user = self.bias_initializer
        seed = None if self.seed is None else self.seed + 2
        self.bias_initializer = _ForgetGateBias(seeded_initializer(user, seed), self.units)
        try:
            super().build(input_shape)
        finally:
            self.bias_initializer = user

    def _step(self, inputs, recurrent_inputs, states, weights):
        z = (self._project(inputs, weights.kernel, weights)
             + self._project(recurrent_inputs, weights.recurrent_kernel, weights))
        if weights.bias is not None:
            z = z + weights.bias
        i, f, g, o = ops.split(z, 4, axis=-1)
        c = (self.recurrent_activation(f) * states[1]
             + self.recurrent_activation(i) * self.activation(g))
        h = self.recurrent_activation(o) * self.activation(c)
        return h, [h, c]

    def get_config(self):
        config = super().get_config()
        config["unit_forget_bias"] = self.unit_forget_bias
        return config

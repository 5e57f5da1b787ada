"""LSTM cell with variational weights, one weight sample per sequence pass."""

import keras

from tfp_bnn.layers.recurrent._recurrent_cell import BayesianRNNCellBase
from tfp_bnn.layers.recurrent._recurrent_gates import LSTMGates


@keras.saving.register_keras_serializable(package="tfp_bnn")
class LSTMCellReparameterization(LSTMGates, BayesianRNNCellBase):
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
    once per pass however many steps (see `tfp_bnn/layers/recurrent/_recurrent_cell.py`).
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
    >>> layer(np.zeros((2, 5, 3), "float32")).shape   # [batch, steps, features] in
    TensorShape([2, 5, 32])
    """

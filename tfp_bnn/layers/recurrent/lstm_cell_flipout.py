"""LSTM cell with Flipout weight noise, one perturbation per sequence pass."""

import keras

from tfp_bnn.layers.recurrent._recurrent_cell import BayesianRNNCellFlipout
from tfp_bnn.layers.recurrent._recurrent_gates import LSTMGates


@keras.saving.register_keras_serializable(package="tfp_bnn")
class LSTMCellFlipout(LSTMGates, BayesianRNNCellFlipout):
    """Long short-term memory cell with Flipout weights, fixed over a sequence.

    The Flipout counterpart of `LSTMCellReparameterization`: the same gates
    i, f, c, o in Keras's order and weight layout,

        z = x @ W_n + h_{t-1} @ U_n + b,   (i, f, g, o) = split(z, 4)
        c_t = sig(f) * c_{t-1} + sig(i) * tanh(g),   h_t = sig(o) * tanh(c_t)

    where example n of the batch runs with W_n = loc_W + delta_W * (s_n r_n^T)
    and U_n = loc_U + delta_U * (s'_n r'_n^T) (Wen et al., 2018, "Flipout",
    ICLR). Inside `keras.layers.RNN`, delta_W, delta_U (w = loc + delta is a
    draw from q) and the random sign vectors s_n, r_n, s'_n, r'_n are drawn
    once per sequence pass, so every example keeps its weights for all its
    steps, and kl_weight * KL(q || p) enters the loss once per pass however
    many steps (see `tfp_bnn/layers/recurrent/_recurrent_cell.py`). Each example's
    weights are distributed as q, as with `LSTMCellReparameterization`, but
    the examples' perturbations are uncorrelated, which lowers the variance
    of the gradient for a second pair of matmuls per step. With the posterior
    collapsed to its mean (`tfp_bnn.set_mean_mode`) the cell computes what
    `keras.layers.LSTMCell` computes with W, U, b = the means.

    Deviation from `keras.layers.LSTMCell`: no `implementation` argument;
    dropout uses one mask for all gates (Keras's default implementation).

    Args:
        units: positive int, dimensionality of the output space.
        unit_forget_bias: if True, the forget gate's bias starts at 1
            (Jozefowicz et al., 2015), as in Keras.
        **kwargs: every other argument of `keras.layers.LSTMCell`
            (activation, recurrent_activation, use_bias, kernel_initializer,
            recurrent_initializer, bias_initializer, *_regularizer,
            *_constraint, dropout, recurrent_dropout) plus `posterior`
            (location-scale only), `prior`, `kl_weight`, `kl_estimator`,
            `bayesian_bias`, `seed` (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: [batch, features], one timestep.
        states: [h, c], each [batch, units].
        training: True draws noise (always); at inference the cell samples
            unless mean mode is on.

    Returns:
        (h, [h, c]).

    Example:
    >>> layer = keras.layers.RNN(LSTMCellFlipout(32, kl_weight=1 / 2556))
    >>> layer(np.zeros((2, 5, 3), "float32")).shape   # [batch, steps, features] in
    TensorShape([2, 32])
    """

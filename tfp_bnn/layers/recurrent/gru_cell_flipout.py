"""GRU cell with Flipout weight noise, one perturbation per sequence pass."""

import keras

from tfp_bnn.layers.recurrent._recurrent_cell import BayesianRNNCellFlipout
from tfp_bnn.layers.recurrent._recurrent_gates import GRUGates


@keras.saving.register_keras_serializable(package="tfp_bnn")
class GRUCellFlipout(GRUGates, BayesianRNNCellFlipout):
    """Gated recurrent unit cell with Flipout weights, fixed over a sequence.

    The Flipout counterpart of `GRUCellReparameterization`, with Keras's gate
    order (z, r, h) and weight layout:

        (x_z, x_r, x_h) = split(x @ W_n + b_in, 3)
        (u_z, u_r, u_h) = split(h_{t-1} @ U_n + b_rec, 3)      reset_after=True
        z = sig(x_z + u_z),  r = sig(x_r + u_r),  hh = tanh(x_h + r * u_h)
        h_t = z * h_{t-1} + (1 - z) * hh

    (with reset_after=False, u_h = (r * h_{t-1}) @ U_n,h and one bias b_in),
    where example n runs with W_n = loc_W + delta_W * (s_n r_n^T) and
    U_n = loc_U + delta_U * (s'_n r'_n^T) (Wen et al., 2018, "Flipout",
    ICLR). Inside `keras.layers.RNN` the perturbations and the per-example
    sign vectors are drawn once per sequence pass, so every example keeps its
    weights for all its steps, and kl_weight * KL(q || p) enters the loss
    once per pass however many steps (see `tfp_bnn/layers/recurrent/_recurrent_cell.py`).
    In mean mode (`tfp_bnn.set_mean_mode`) the cell computes what
    `keras.layers.GRUCell` computes with the posterior means.

    Deviation from `keras.layers.GRUCell`: no `implementation` argument;
    dropout uses one mask for all gates (Keras's default implementation).

    Args:
        units: positive int, dimensionality of the output space.
        reset_after: apply the reset gate after the recurrent matmul (True,
            Keras's default and CuDNN's convention; bias shape [2, 3 * units])
            or before it (False; bias shape [3 * units]).
        **kwargs: every other argument of `keras.layers.GRUCell` plus
            `posterior` (location-scale only), `prior`, `kl_weight`,
            `kl_estimator`, `bayesian_bias`, `seed` (see
            `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: [batch, features], one timestep.
        states: h, [batch, units] (or a list holding it).
        training: True draws noise (always); at inference the cell samples
            unless mean mode is on.

    Returns:
        (h, new state in the structure of `states`).

    Example:
    >>> layer = keras.layers.RNN(GRUCellFlipout(32), return_sequences=True)
    >>> layer(np.zeros((2, 5, 3), "float32")).shape   # [batch, steps, features] in
    TensorShape([2, 5, 32])
    """

"""GRU cell with variational weights, one weight sample per sequence pass."""

import keras

from tfp_bnn.layers.recurrent._recurrent_cell import BayesianRNNCellBase
from tfp_bnn.layers.recurrent._recurrent_gates import GRUGates


@keras.saving.register_keras_serializable(package="tfp_bnn")
class GRUCellReparameterization(GRUGates, BayesianRNNCellBase):
    """Gated recurrent unit cell whose weights are drawn once per sequence.

    The Bayesian counterpart of `keras.layers.GRUCell` (Cho et al., 2014,
    EMNLP), with Keras's gate order (z, r, h) and weight layout:

        (x_z, x_r, x_h) = split(x @ W + b_in, 3)
        (u_z, u_r, u_h) = split(h_{t-1} @ U + b_rec, 3)      reset_after=True
        z = sig(x_z + u_z),  r = sig(x_r + u_r),  hh = tanh(x_h + r * u_h)
        h_t = z * h_{t-1} + (1 - z) * hh

    (with reset_after=False, u_h = (r * h_{t-1}) @ U_h and one bias b_in).
    W (kernel), U (recurrent kernel) and optionally the bias have posteriors;
    in `keras.layers.RNN` they are sampled once per sequence and reused at
    every step (Fortunato et al., 2017, "Bayesian Recurrent Neural
    Networks", arXiv:1704.02798, sec. 3), and kl_weight * KL(q || p) enters
    the loss once per pass however many steps (see
    `tfp_bnn/layers/recurrent/_recurrent_cell.py`). In mean mode
    (`tfp_bnn.set_mean_mode`) the cell computes what `keras.layers.GRUCell`
    computes with the posterior means.

    Deviation from `keras.layers.GRUCell`: no `implementation` argument;
    dropout uses one mask for all gates (Keras's default implementation).

    Args:
        units: positive int, dimensionality of the output space.
        reset_after: apply the reset gate after the recurrent matmul (True,
            Keras's default and CuDNN's convention; bias shape [2, 3 * units])
            or before it (False; bias shape [3 * units]).
        **kwargs: every other argument of `keras.layers.GRUCell` plus
            `posterior`, `prior`, `kl_weight`, `kl_estimator`,
            `bayesian_bias`, `seed` (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: [batch, features], one timestep.
        states: h, [batch, units] (or a list holding it).
        training: True draws noise (always); at inference the cell samples
            unless mean mode is on.

    Returns:
        (h, new state in the structure of `states`).

    Example:
    >>> layer = keras.layers.RNN(GRUCellReparameterization(32))
    >>> layer(np.zeros((2, 5, 3), "float32")).shape   # [batch, steps, features] in
    TensorShape([2, 32])
    """

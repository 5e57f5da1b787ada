"""GRU cell with variational weights, one weight sample per sequence pass."""

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.layers._recurrent_cell import BayesianRNNCellBase


@keras.saving.register_keras_serializable(package="tfp_bnn")
class GRUCellReparameterization(BayesianRNNCellBase):
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
    `tfp_bnn/layers/_recurrent_cell.py`). In mean mode
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
    """

    gates = 3

    def __init__(self, units, reset_after=True, **kwargs):
        super().__init__(units, **kwargs)
        self.reset_after = _validation.boolean("reset_after", reset_after)
        self.state_size = self.units

    def _bias_shape(self):
        width = self.gates * self.units
        return (2, width) if self.reset_after else (width,)

    def _step(self, inputs, recurrent_inputs, states, weights):
        previous = states[0] if isinstance(states, (list, tuple)) else states
        bias = weights.bias
        if bias is not None and self.reset_after:
            input_bias, recurrent_bias = bias[..., 0, :], bias[..., 1, :]
        else:
            input_bias, recurrent_bias = bias, None
        projected = self._project(inputs, weights.kernel, weights)
        if input_bias is not None:
            projected = projected + input_bias
        x_z, x_r, x_h = ops.split(projected, 3, axis=-1)
        kernel = weights.recurrent_kernel
        split = 3 * self.units if self.reset_after else 2 * self.units
        inner = self._project(recurrent_inputs, kernel[..., :split], weights)
        if recurrent_bias is not None:
            inner = inner + recurrent_bias
        u_z, u_r = inner[:, :self.units], inner[:, self.units:2 * self.units]
        z = self.recurrent_activation(x_z + u_z)
        r = self.recurrent_activation(x_r + u_r)
        if self.reset_after:
            u_h = r * inner[:, 2 * self.units:]
        else:
            u_h = self._project(r * recurrent_inputs, kernel[..., split:], weights)
        h = z * previous + (1.0 - z) * self.activation(x_h + u_h)
        return h, ([h] if isinstance(states, (list, tuple)) else h)

    def get_config(self):
        config = super().get_config()
        config["reset_after"] = self.reset_after
        return config

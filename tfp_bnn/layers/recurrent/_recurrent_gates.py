"""The gate math of the variational LSTM and GRU cells, shared by their estimators.

`LSTMGates` and `GRUGates` are mixins listed before a recurrent-cell base
(`_recurrent_cell.BayesianRNNCellBase` for reparameterization,
`BayesianRNNCellFlipout` for Flipout): they add the cell's own arguments,
the number of gate blocks, and `_step`, Keras's gate equations on the
weights of one pass. How a pass's weights meet the inputs (one sample for
the batch, or Flipout's per-example perturbation) is the base's
`_project`, so the equations are written once for both estimators.
"""

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.posteriors import seeded_initializer


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


class LSTMGates:
    """LSTM gates i, f, c, o in Keras's order and weight layout (`keras.layers.LSTMCell`)."""

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


class GRUGates:
    """GRU gates z, r, h in Keras's order and weight layout (`keras.layers.GRUCell`)."""

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

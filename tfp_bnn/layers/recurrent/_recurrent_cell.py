"""What the variational LSTM and GRU cells share: weights drawn once per sequence pass.

A Keras cell is called once per timestep inside `keras.layers.RNN`'s loop,
but a Bayesian recurrent network draws its weights once per sequence and
runs every step with them (Fortunato et al., 2017, "Bayesian Recurrent
Neural Networks", arXiv:1704.02798, sec. 3; as Gal & Ghahramani, 2016,
NeurIPS, share one dropout mask over the steps). Keras already has the hook
for per-pass randomness: `RNN.call` asks a `DropoutRNNCell` for its dropout
masks once, before the loop, and resets them after it, so the loop body only
reads them. The cells here draw kernel, recurrent kernel and bias in that
hook and reuse them at every step, so the stock `keras.layers.RNN` (and
`Bidirectional`, `StackedRNNCells`) keeps all its semantics: return_sequences,
return_state, masking, go_backwards, stateful, unroll. The hook also sets up
the KL: it enters the loss through the layer's weight regularizer
(`_kl_tracking.KLRegularizer`), which Keras counts once per step whatever the
number of time steps. A cell called on its own (outside `RNN`) draws at every
call, as a Dense layer does, and its KL still counts once per step.

The same hook serves both Keras backends. On TensorFlow the loop is a
`tf.while_loop`; on JAX `keras.layers.RNN` runs the cell inside
`jax.lax.scan`, whose body can neither advance a seed generator nor hand a
loss out of the scan. There the pass's weights are traced values made
before the scan and closed over by its body, so every step reads the same
draw; the KL, a function of the weights alone, is read with the layer's
losses outside the scan, once per training step, as on TensorFlow.

Two estimators: `BayesianRNNCellBase` runs the whole batch on one weight
sample per pass (reparameterization); `BayesianRNNCellFlipout` gives each
row its own sign-flipped perturbation of it (Flipout). The gate equations
live in `_recurrent_gates`. Inside `tfp_bnn.predict`'s `sample_trace` (rows
tiled S times) the pass holds S weight samples and tile s of the rows meets
sample s at every step, for both estimators.
"""

import collections
import threading

import keras
from keras import ops

from tfp_bnn import _keras_internals
from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn.layers.variational.base import BayesianLayer
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers._tracing import sample_context

# The weights of one pass; `samples` is S when each is stacked [S, ...] for
# tiled rows (a stacked bias is already repeated per row), else None.
PassWeights = collections.namedtuple(
    "PassWeights", ["kernel", "recurrent_kernel", "bias", "samples"])


class FlipoutKernel:
    """A pass's Flipout kernel: row n of the batch multiplies by loc + delta * (s_n r_n^T).

    x_n @ (loc + delta * s_n r_n^T) = x_n @ loc + ((x_n * s_n) @ delta) * r_n
    (Wen et al. 2018), computed in the second form: two matmuls for the
    batch. Slicing its columns (`kernel[..., :k]`, as the GRU's gates do)
    slices loc, delta and the output signs alike, so a slice is the same
    per-row kernel's columns.
    """

    def __init__(self, loc, delta, sign_in, sign_out):
        self.loc = loc  # [fan_in, width]
        self.delta = delta  # [fan_in, width], one draw for the pass
        self.sign_in = sign_in  # [batch, fan_in]
        self.sign_out = sign_out  # [batch, width]

    def __getitem__(self, columns):
        return FlipoutKernel(self.loc[columns], self.delta[columns], self.sign_in,
                             self.sign_out[columns])

    def project(self, x):
        return ops.matmul(x, self.loc) + ops.matmul(x * self.sign_in, self.delta) * self.sign_out


class BayesianRNNCellBase(_keras_internals.DropoutRNNCell, BayesianLayer):
    """A `BayesianLayer` with the arguments of `keras.layers.LSTMCell`/`GRUCell`.

    Subclasses set `gates` (the number of gate blocks in the kernels) and
    implement `_step(inputs, recurrent_inputs, states, weights)`, the gate
    math on inputs and (recurrent-dropped) previous output.

    Dropout follows Keras's default implementation: one input mask and one
    recurrent mask shared by all gates and all steps of a pass.
    """

    gates = None

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, **kwargs):
        units = _validation.integer("units", units)
        super().__init__(
            activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, **kwargs)
        self.units = units
        self.recurrent_activation = keras.activations.get(recurrent_activation)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.recurrent_regularizer = keras.regularizers.get(recurrent_regularizer)
        self.recurrent_constraint = keras.constraints.get(recurrent_constraint)
        self.dropout = _validation.number("dropout", dropout, low=0.0, high=1.0)
        self.recurrent_dropout = _validation.number("recurrent_dropout", recurrent_dropout,
                                                    low=0.0, high=1.0)
        self.output_size = units
        self.recurrent_kernel_params = None
        self._recurrent_prior_built = None
        # thread id -> PassWeights of the pass `keras.layers.RNN` is running.
        self._passes = {}

    def build(self, input_shape):
        width = self.gates * self.units
        self._build_weights((input_shape[-1], width), self._bias_shape())
        self.recurrent_kernel_params, self._recurrent_prior_built = self._variational_weight(
            "recurrent_kernel", (self.units, width), self.recurrent_initializer,
            self.recurrent_regularizer, self.recurrent_constraint,
            None if self.seed is None else self.seed + 4)

    def _bias_shape(self):
        return (self.gates * self.units,)

    # -- inspection -------------------------------------------------------------
    recurrent_kernel_posterior = property(
        lambda self: self._weight_posterior(self.recurrent_kernel_params),
        doc="q(recurrent kernel), a `tfd.Distribution`, event shape [units, gates * units].")
    recurrent_kernel_prior = property(
        lambda self: self._weight_prior(self.recurrent_kernel_params),
        doc="p(recurrent kernel), a `tfd.Distribution`, event shape [units, gates * units].")

    def _prior_for(self, params):
        if params is not None and params is self.recurrent_kernel_params:
            return self._recurrent_prior_built or self.prior
        return super()._prior_for(params)

    def kl_divergence(self):
        """KL(q || p) of kernel, recurrent kernel and (Bayesian) bias, in nats."""
        kl = super().kl_divergence()
        with float32_variables():
            seed = None if self._use_analytic_kl() else self._call_seeds()[2]
            draw = self._draw(self.recurrent_kernel_params, seed, with_noise=False)
            return kl + self._kl_of(draw)

    # -- one pass ---------------------------------------------------------------
    def get_dropout_mask(self, step_input):
        # `keras.layers.RNN` calls this once before its loop: the pass's weights
        # (and its KL) are drawn here, outside the loop body.
        training = _keras_internals.call_training()
        with float32_variables():
            step_input = ops.cast(step_input, self.compute_dtype)
            self._passes[threading.get_ident()] = self._draw_pass(step_input, training)
        return super().get_dropout_mask(step_input)

    def reset_dropout_mask(self):
        self._passes.pop(threading.get_ident(), None)
        super().reset_dropout_mask()

    def _sample(self, draw, noise_scale):
        mean = ops.cast(self.posterior.mean(draw.prepared), self.compute_dtype)
        return mean + self._scaled(draw.perturbation, noise_scale)

    def _draw_pass(self, step_input, training):
        """Kernel, recurrent kernel and bias for a pass; adds kl_weight * KL once."""
        context = sample_context()
        if context is not None and not training:
            return self._sampled_pass(step_input, context)
        noise_scale = self._noise_scale(training)
        seeds = self._call_seeds()
        kernel_draw = self._draw(self.kernel_params, seeds[0])
        recurrent_draw = self._draw(self.recurrent_kernel_params, seeds[2])
        bias, bias_draw = self._bias_value(noise_scale, seeds[1])
        self._add_kl(step_input, training, kernel_draw, bias_draw, recurrent_draw)
        kernel, recurrent = self._pass_kernels(step_input, kernel_draw, recurrent_draw,
                                               noise_scale, seeds[3])
        return PassWeights(kernel, recurrent, bias, None)

    def _pass_kernels(self, step_input, kernel_draw, recurrent_draw, noise_scale, seed):
        """Kernel and recurrent kernel of a pass: here one sample each for the whole batch.

        `seed` is the pass's spare seed pair (Flipout's signs).
        """
        return self._sample(kernel_draw, noise_scale), self._sample(recurrent_draw, noise_scale)

    def predictive_samples(self, num_samples):
        """(kernels, recurrent kernels, biases or None), S samples each (see `WeightSampling`)."""
        kernels, biases = super().predictive_samples(num_samples)
        with float32_variables():
            recurrent = self._sample_n(self.recurrent_kernel_params, num_samples,
                                       self._call_seeds()[2], self._noise_scale(False))
        return kernels, recurrent, biases

    def _sampled_pass(self, step_input, context):
        samples = context.num_samples
        draws = context.draws.get(id(self))
        kernels, recurrent, biases = draws or self.predictive_samples(samples)
        if biases is not None:  # per-sample bias, repeated for the rows of its tile
            bias = ops.repeat(biases, ops.shape(step_input)[0] // samples, axis=0)
        else:
            bias = ops.cast(self.bias, self.compute_dtype) if self.use_bias else None
        return PassWeights(kernels, recurrent, bias, samples)

    @staticmethod
    def _project(x, kernel, weights):
        """x @ kernel, per tile x[tile s] @ kernel[s] for stacked samples, or Flipout's."""
        if isinstance(kernel, FlipoutKernel):
            return kernel.project(x)
        if weights.samples is None:
            return ops.matmul(x, kernel)
        tiles = ops.reshape(x, (weights.samples, -1, x.shape[-1]))
        return ops.reshape(ops.matmul(tiles, kernel), (-1, kernel.shape[-1]))

    # -- one step ---------------------------------------------------------------
    def call(self, inputs, states, training=False):
        with float32_variables():
            inputs = ops.cast(inputs, self.compute_dtype)
            weights = self._passes.get(threading.get_ident())
            if weights is None:  # called outside keras.layers.RNN: a draw per call
                weights = self._draw_pass(inputs, training)
            previous = states[0] if keras.tree.is_nested(states) else states
            recurrent_inputs = previous
            if training and 0.0 < self.dropout < 1.0:
                inputs = inputs * super().get_dropout_mask(inputs)
            if training and 0.0 < self.recurrent_dropout < 1.0:
                recurrent_inputs = previous * self.get_recurrent_dropout_mask(previous)
            return self._step(inputs, recurrent_inputs, states, weights)

    def _step(self, inputs, recurrent_inputs, states, weights):
        raise NotImplementedError(f"{type(self).__name__} must define `_step`.")

    def get_initial_state(self, batch_size=None):
        sizes = self.state_size if isinstance(self.state_size, list) else [self.state_size]
        return [ops.zeros((batch_size, size), dtype=self.compute_dtype) for size in sizes]

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units,
            "recurrent_activation": keras.activations.serialize(self.recurrent_activation),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            "recurrent_regularizer": keras.regularizers.serialize(self.recurrent_regularizer),
            "recurrent_constraint": keras.constraints.serialize(self.recurrent_constraint),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
        })
        return config


class BayesianRNNCellFlipout(BayesianRNNCellBase):
    """A recurrent cell base with Flipout weight noise (Wen et al. 2018).

    Once per pass it draws the perturbations delta_W, delta_U of kernel and
    recurrent kernel and, for every row n of the batch, random sign vectors
    s_n, r_n for each of the two matmuls; at every step row n then runs with
    the kernels loc + delta * (s_n r_n^T) (`FlipoutKernel`). Each row sees
    weights distributed as q for the whole sequence, as with one sample per
    pass, but the rows' perturbations are uncorrelated, which lowers the
    gradient's variance (Wen et al. regularise LSTMs with it, sec. 4). A
    Bayesian bias is one draw per pass, as in `DenseFlipout`. Prediction
    inside `tfp_bnn.predict` uses whole weight samples per tile, which have
    the same distribution.
    """

    requires_location_scale = True

    def _pass_kernels(self, step_input, kernel_draw, recurrent_draw, noise_scale, seed):
        dtype = self.compute_dtype
        shape = noise.shape_of(step_input)
        width = self.gates * self.units
        seeds = noise.split(seed, 4)

        def flipout(draw, fan_in, sign_seeds):
            loc = ops.cast(self.posterior.mean(draw.prepared), dtype)
            delta = self._scaled(draw.perturbation, noise_scale)
            return FlipoutKernel(loc, delta, noise.signs([shape[0], fan_in], dtype, sign_seeds[0]),
                                 noise.signs([shape[0], width], dtype, sign_seeds[1]))

        return (flipout(kernel_draw, shape[-1], seeds[:2]),
                flipout(recurrent_draw, self.units, seeds[2:]))

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
        activation: activation of the cell state and output (default "tanh"), as
            in `keras.layers.LSTMCell`.
        recurrent_activation: activation of the gates (default "sigmoid"), as in
            Keras.
        use_bias: whether the cell adds a bias (default True).
        kernel_initializer: initializer of the kernel's posterior mean
            (default "glorot_uniform").
        recurrent_initializer: initializer of the recurrent kernel's posterior
            mean (default "orthogonal").
        bias_initializer: initializer of the bias (of its posterior mean with
            `bayesian_bias=True`), default "zeros".
        unit_forget_bias: if True, the forget gate's bias starts at 1
            (Jozefowicz et al., 2015), as in Keras.
        kernel_regularizer: regularizer of the kernel's posterior mean.
        recurrent_regularizer: regularizer of the recurrent kernel's posterior
            mean.
        bias_regularizer: regularizer of the bias (of its posterior mean with
            `bayesian_bias=True`).
        kernel_constraint: constraint on the kernel's posterior mean.
        recurrent_constraint: constraint on the recurrent kernel's posterior
            mean.
        bias_constraint: constraint on the bias (on its posterior mean with
            `bayesian_bias=True`).
        dropout: float in [0, 1], the fraction of the inputs dropped (one mask
            per sequence pass, shared by the gates).
        recurrent_dropout: float in [0, 1], the fraction of the recurrent state
            dropped (one mask per sequence pass).
        seed: int or None; seeds the weight noise, the dropout masks and the
            initial weights.
        posterior: a location-scale `tfp_bnn.posteriors.Posterior` (w = loc +
            scale * eps, e.g. `MeanFieldNormal`), its registered name, or None
            for `MeanFieldNormal()`.
        prior: a `tfp_bnn.priors.Prior`, its registered name, or None for
            N(0, 1).
        kl_weight: the weight of this layer's KL in the loss, >= 0, usually 1/N
            for N training examples; None leaves it at 1.0 until a
            `tfp_bnn.callbacks.KLScheduler` sets it (with a warning if training
            starts with it unset).
        kl_estimator: "analytic" (closed-form KL, needs a prior with one), "mc"
            (one-sample Monte Carlo log q(w) - log p(w) at the weights of the
            forward pass, Blundell et al. 2015) or "auto" (analytic where TFP
            has it, else Monte Carlo; the default).
        bayesian_bias: if True the bias gets a posterior and a prior too; the
            default False keeps a deterministic bias, as TFP does.
        **kwargs: base layer keyword arguments (`name`, `dtype`, `trainable`,
            ...); TFP's argument names (`kernel_prior_fn`, ...) are refused with
            a message naming their replacement.

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

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", unit_forget_bias=True, kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, posterior=None, prior=None, kl_weight=None,
                 kl_estimator="auto", bayesian_bias=False, **kwargs):
        super().__init__(
            units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias, kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint, dropout=dropout, recurrent_dropout=recurrent_dropout,
            seed=seed, posterior=posterior, prior=prior, kl_weight=kl_weight,
            kl_estimator=kl_estimator, bayesian_bias=bayesian_bias, **kwargs)

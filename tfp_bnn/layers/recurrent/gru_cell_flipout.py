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
        activation: activation of the cell state and output (default "tanh"), as
            in `keras.layers.GRUCell`.
        recurrent_activation: activation of the gates (default "sigmoid"), as in
            Keras.
        use_bias: whether the cell adds a bias (default True).
        kernel_initializer: initializer of the kernel's posterior mean
            (default "glorot_uniform").
        recurrent_initializer: initializer of the recurrent kernel's posterior
            mean (default "orthogonal").
        bias_initializer: initializer of the bias (of its posterior mean with
            `bayesian_bias=True`), default "zeros".
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
        reset_after: apply the reset gate after the recurrent matmul (True,
            Keras's default and CuDNN's convention; bias shape [2, 3 * units])
            or before it (False; bias shape [3 * units]).
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

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal",
                 bias_initializer="zeros", kernel_regularizer=None, recurrent_regularizer=None,
                 bias_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                 bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, reset_after=True,
                 seed=None, posterior=None, prior=None, kl_weight=None, kl_estimator="auto",
                 bayesian_bias=False, **kwargs):
        super().__init__(
            units, activation=activation, recurrent_activation=recurrent_activation,
            use_bias=use_bias, kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer, kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint,
            dropout=dropout, recurrent_dropout=recurrent_dropout, reset_after=reset_after,
            seed=seed, posterior=posterior, prior=prior, kl_weight=kl_weight,
            kl_estimator=kl_estimator, bayesian_bias=bayesian_bias, **kwargs)

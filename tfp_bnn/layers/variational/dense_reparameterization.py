"""Dense layer with a sampled kernel: the reparameterization estimator."""

import keras

from tfp_bnn.layers.variational._dense_base import BayesianDenseBase
from tfp_bnn.layers.variational._estimators import reparameterization_call


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseReparameterization(BayesianDenseBase):
    """Densely connected layer whose kernel is a random variable.

    Keras 3 counterpart of TFP's `DenseReparameterization` (tf_keras only). Each call
    draws one kernel w = loc + softplus(rho) * eps (Blundell et al. 2015, sec. 3.2) that
    the whole batch shares, computes `activation(inputs @ w + bias)`, and adds
    kl_weight * KL(q(w) || p(w)) to the layer's losses.

    Args:
        units: positive int, the output dimension.
        activation: activation function or its name, as in `keras.layers.Dense`
            (default None: linear).
        use_bias: whether the layer adds a bias (default True).
        kernel_initializer: initializer of the kernel's posterior mean
            (default "glorot_uniform").
        bias_initializer: initializer of the bias (of its posterior mean with
            `bayesian_bias=True`), default "zeros".
        kernel_regularizer: regularizer of the kernel's posterior mean.
        bias_regularizer: regularizer of the bias (of its posterior mean with
            `bayesian_bias=True`).
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the kernel's posterior mean.
        bias_constraint: constraint on the bias (on its posterior mean with
            `bayesian_bias=True`).
        posterior: a `tfp_bnn.posteriors.Posterior`, its registered name, or
            None for `MeanFieldNormal()`.
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
        seed: int or None; seeds the weight noise and the initial weights.
        **kwargs: base layer keyword arguments (`name`, `dtype`, `trainable`,
            ...); TFP's argument names (`kernel_prior_fn`, ...) are refused with
            a message naming their replacement.

    Call arguments:
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> layer = DenseReparameterization(4, kl_weight=1 / 1000, seed=0)
    >>> layer(keras.ops.ones((2, 3))).shape
    TensorShape([2, 4])
    """

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 posterior=None, prior=None, kl_weight=None, kl_estimator="auto",
                 bayesian_bias=False, seed=None, **kwargs):
        super().__init__(
            units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
            posterior=posterior, prior=prior, kl_weight=kl_weight, kl_estimator=kl_estimator,
            bayesian_bias=bayesian_bias, seed=seed, **kwargs)

    def _variational_call(self, inputs, training):
        return reparameterization_call(self, inputs, training)

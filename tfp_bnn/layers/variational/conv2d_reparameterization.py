"""2-D convolution with a sampled kernel: the reparameterization estimator."""

import keras

from tfp_bnn.layers.variational._conv_base import ConvReparameterization


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Conv2DReparameterization(ConvReparameterization):
    """2-D convolution whose kernel is a random variable.

    Keras 3 counterpart of TFP's `Convolution2DReparameterization` (tf_keras only). Each
    call draws one kernel w = loc + softplus(rho) * eps that the whole batch
    shares, convolves, and adds kl_weight * KL(q(w) || p(w)) to the losses.

    Args:
        filters: positive int, the number of output channels.
        kernel_size: int or tuple of 2 ints, the convolution window.
        strides: int or tuple of 2 ints (default 1).
        padding: "valid" or "same", case-insensitive (default "valid").
        data_format: "channels_last" (batch, H, W, channels) or
            "channels_first"; None uses Keras' image data format.
        dilation_rate: int or tuple of 2 ints (default 1).
        groups: positive int dividing the input channels and `filters`
            (default 1), as in `keras.layers.Conv2D`.
        activation: activation function or its name, as in `keras.layers.Conv2D`
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
        inputs: 4-D tensor, (batch, H, W, C) for channels_last.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        4-D tensor, as `keras.layers.Conv2D` returns.

    Example:
    >>> layer = Conv2DReparameterization(8, 3, padding="same", kl_weight=1e-3, seed=0)
    >>> layer(np.ones((2, 8, 8, 1), "float32")).shape
    TensorShape([2, 8, 8, 8])
    """

    rank = 2

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, posterior=None, prior=None,
                 kl_weight=None, kl_estimator="auto", bayesian_bias=False, seed=None, **kwargs):
        super().__init__(
            filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
            dilation_rate=dilation_rate, groups=groups, activation=activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, posterior=posterior, prior=prior, kl_weight=kl_weight,
            kl_estimator=kl_estimator, bayesian_bias=bayesian_bias, seed=seed, **kwargs)


# TFP's class name, so that `tfp.layers.Convolution2DReparameterization` ports by import alone.
Convolution2DReparameterization = Conv2DReparameterization

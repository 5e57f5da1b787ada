"""3-D convolution with a sampled kernel: the reparameterization estimator."""

import keras

from tfp_bnn.layers.variational._conv_base import ConvReparameterization


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Conv3DReparameterization(ConvReparameterization):
    """3-D convolution whose kernel is a random variable.

    Keras 3 counterpart of TFP's `Convolution3DReparameterization` (tf_keras
    only). Each call draws one kernel w = loc + softplus(rho) * eps that the
    whole batch shares, convolves, and adds kl_weight * KL(q(w) || p(w)) to
    the losses.

    Args:
        filters: positive int, the number of output channels.
        kernel_size: int or tuple of 3 ints, the convolution window.
        strides: int or tuple of 3 ints (default 1).
        padding: "valid" or "same", case-insensitive (default "valid").
        data_format: "channels_last" (batch, D, H, W, channels) or
            "channels_first"; None uses Keras' image data format.
        dilation_rate: int or tuple of 3 ints (default 1).
        groups: positive int dividing the input channels and `filters`
            (default 1), as in `keras.layers.Conv3D`.
        **kwargs: the other arguments of `keras.layers.Conv3D` plus
            `posterior`, `prior`, `kl_weight`, `kl_estimator`,
            `bayesian_bias`, `seed` (see `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: 5-D tensor, (batch, D, H, W, C) for channels_last.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        5-D tensor, as `keras.layers.Conv3D` returns.

    Example:
    >>> layer = Conv3DReparameterization(4, 3, padding="same", kl_weight=1e-3, seed=0)
    >>> layer(np.ones((1, 4, 4, 4, 1), "float32")).shape
    TensorShape([1, 4, 4, 4, 4])
    """

    rank = 3


# TFP's class name, so that `tfp.layers.Convolution3DReparameterization` ports by import alone.
Convolution3DReparameterization = Conv3DReparameterization

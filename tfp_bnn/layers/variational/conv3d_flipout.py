"""3-D convolution with Flipout: decorrelated weight noise per example."""

import keras

from tfp_bnn.layers.variational._conv_base import ConvFlipout


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Conv3DFlipout(ConvFlipout):
    """3-D convolution with Flipout weight noise (Wen et al., 2018).

    Keras 3 counterpart of TFP's `Convolution3DFlipout` (tf_keras only):

        y_n = conv(x_n, loc) + conv(x_n * s_n, delta) * r_n

    with delta = softplus(rho) * eps drawn once per call and sign vectors
    s_n (input channels) and r_n (filters) drawn per example and shared over
    the spatial positions, so each example sees one whole kernel from q(w).

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
            `posterior` (location-scale only), `prior`, `kl_weight`,
            `kl_estimator`, `bayesian_bias`, `seed` (see
            `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: 5-D tensor, (batch, D, H, W, C) for channels_last.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        5-D tensor, as `keras.layers.Conv3D` returns.

    Example:
    >>> layer = Conv3DFlipout(4, 3, padding="same", kl_weight=1e-3, seed=0)
    >>> layer(np.ones((1, 4, 4, 4, 1), "float32")).shape
    TensorShape([1, 4, 4, 4, 4])
    """

    rank = 3


# TFP's class name, so that `tfp.layers.Convolution3DFlipout` ports by import alone.
Convolution3DFlipout = Conv3DFlipout

"""1-D convolution with Flipout: decorrelated weight noise per example."""

import keras

from tfp_bnn.layers.variational._conv_base import ConvFlipout


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Conv1DFlipout(ConvFlipout):
    """1-D convolution with Flipout weight noise (Wen et al., 2018).

    Keras 3 counterpart of TFP's `Convolution1DFlipout` (tf_keras only):

        y_n = conv(x_n, loc) + conv(x_n * s_n, delta) * r_n

    with delta = softplus(rho) * eps drawn once per call and sign vectors
    s_n (input channels) and r_n (filters) drawn per example and shared over
    the time steps, so each example sees one whole kernel from q(w).

    Args:
        filters: positive int, the number of output channels.
        kernel_size: int or tuple of one int, the convolution window.
        strides: int or tuple of one int (default 1).
        padding: "valid", "same" or "causal", case-insensitive (default "valid").
        data_format: "channels_last" (batch, steps, channels) or
            "channels_first"; None uses Keras' image data format.
        dilation_rate: int or tuple of one int (default 1).
        groups: positive int dividing the input channels and `filters`
            (default 1), as in `keras.layers.Conv1D`.
        **kwargs: the other arguments of `keras.layers.Conv1D` plus
            `posterior` (location-scale only), `prior`, `kl_weight`,
            `kl_estimator`, `bayesian_bias`, `seed` (see
            `tfp_bnn.layers.BayesianLayer`).

    Call arguments:
        inputs: 3-D tensor, (batch, steps, channels) for channels_last.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        3-D tensor, as `keras.layers.Conv1D` returns.

    Example:
    >>> layer = Conv1DFlipout(8, 5, padding="causal", kl_weight=1e-3, seed=0)
    >>> layer(np.ones((2, 10, 3), "float32")).shape
    TensorShape([2, 10, 8])
    """

    rank = 1


# TFP's class name, so that `tfp.layers.Convolution1DFlipout` ports by import alone.
Convolution1DFlipout = Conv1DFlipout

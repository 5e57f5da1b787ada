"""2-D convolution with random multiplicative channels (node-based BNN)."""

import keras

from tfp_bnn.layers.node.node_base import NodeLayer
from tfp_bnn.layers._shapes import Conv2DShapes


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NodeConv2D(Conv2DShapes, NodeLayer):
    """2-D convolution of a node-based BNN (Trinh et al. 2022).

    The kernel U and bias b are ordinary point estimates; the randomness is
    in latent node variables z, one per input channel (`noise="input"`),
    per filter (`"output"`) or both, shared over spatial positions and drawn
    afresh for every example:

        y = act(z_out * (conv(z_in * x, U) + b))

    z has a Gaussian (or Gaussian-plus-normalizing-flow) posterior per
    mixture component, a N(prior_mean, prior_stddev^2) prior, and adds
    kl_weight * KL to the layer's losses; see `tfp_bnn.layers.node.node_base`.

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
        **kwargs: the other arguments of `keras.layers.Conv2D` plus `noise`,
            `posterior`, `num_components`, `prior_mean`, `prior_stddev`,
            `flows`, `flow_length`, `entropy_weight`, `loc_init_stddev`,
            `scale_init`, `kl_weight`, `seed` (see `NodeLayer`).

    Call arguments:
        inputs: 4-D tensor in `data_format`.
        training: True always samples z; at inference z is sampled unless
            mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        4-D tensor, shaped as `keras.layers.Conv2D` would shape it.

    Example:
    >>> model = keras.Sequential([keras.Input((8, 8, 1)),
    ...                           NodeConv2D(16, 3, activation="relu", noise="output"),
    ...                           keras.layers.Flatten(), tfp_bnn.layers.NodeDense(10)])
    >>> model(np.zeros((2, 8, 8, 1), "float32")).shape
    TensorShape([2, 10])
    """

    def build(self, input_shape):
        kernel_shape, bias_shape, channels = self._conv_shapes(input_shape)
        self._build_node_layer(kernel_shape, bias_shape,
                               {"input": channels, "output": self.filters})

    def _node_shape(self, rank, nodes):
        # One z per example and channel, shared over the spatial positions.
        if self.data_format == "channels_last":
            return [-1, 1, 1, nodes]
        return [-1, nodes, 1, 1]

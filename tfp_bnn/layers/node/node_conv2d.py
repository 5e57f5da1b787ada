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
        activation: activation function or its name, as in `keras.layers.Conv2D`
            (default: linear).
        use_bias: whether the layer adds the deterministic bias b.
        kernel_initializer: initializer of the deterministic weights U.
        bias_initializer: initializer of b.
        kernel_regularizer: regularizer of U.
        bias_regularizer: regularizer of b.
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on U.
        bias_constraint: constraint on b.
        noise: which nodes are random: "input", "output" or "both".
        posterior: the posterior of the nodes, an object as the variational
            layers take: `tfp_bnn.posteriors.NodeGaussian()` (diagonal Gaussian
            per component; None is this) or
            `tfp_bnn.posteriors.NodeFlow(flows, length)` (that Gaussian pushed
            through a `tfp_bnn.flows.NormalizingFlow`). The names "gaussian" and
            "flow" stand for them, as a weight posterior's registered name
            stands for it; a `tfp_bnn.posteriors.FlowPosterior` stands for the
            `NodeFlow` with its `flows` and `length`.
        flows: with `posterior="flow"` (the name), the flow kind(s) of its
            `NodeFlow` (default "planar"): the spelling of configs saved before
            the posterior objects. Ignored with "gaussian"; with a posterior
            object, give the flow to `NodeFlow` instead.
        flow_length: with `posterior="flow"`, the number of flow steps of its
            `NodeFlow`, an int >= 0 (default 2; 0: no flow, the Gaussian base
            with a Monte Carlo KL); as `flows` otherwise.
        num_components: K >= 1, the number of mixture components.
        prior_mean: the mean of the prior N(prior_mean, prior_stddev^2) of every
            node.
        prior_stddev: its standard deviation, > 0.
        entropy_weight: gamma >= 0; the loss gets kl_weight * (KL - gamma H[q]).
        loc_init_stddev: the posterior means start at N(1, loc_init_stddev^2).
        scale_init: the posterior standard deviations start at this value, > 0.
        kl_weight: the weight of the KL in the loss, >= 0, usually 1/N. None
            leaves it at 1.0 until a `KLScheduler` sets it (with a warning if
            training starts with it unset).
        seed: int or None; seeds the node noise and the initial weights.
        **kwargs: base layer keyword arguments (`name`, `dtype`, `trainable`,
            ...).

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

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, noise="input", posterior=None,
                 flows=None, flow_length=None, num_components=1, prior_mean=1.0, prior_stddev=0.1,
                 entropy_weight=0.0, loc_init_stddev=0.1, scale_init=0.05, kl_weight=None,
                 seed=None, **kwargs):
        super().__init__(
            filters, kernel_size, strides=strides, padding=padding, data_format=data_format,
            dilation_rate=dilation_rate, groups=groups, activation=activation, use_bias=use_bias,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, noise=noise, posterior=posterior, flows=flows,
            flow_length=flow_length, num_components=num_components, prior_mean=prior_mean,
            prior_stddev=prior_stddev, entropy_weight=entropy_weight,
            loc_init_stddev=loc_init_stddev, scale_init=scale_init, kl_weight=kl_weight, seed=seed,
            **kwargs)

    def build(self, input_shape):
        kernel_shape, bias_shape, channels = self._conv_shapes(input_shape)
        self._build_node_layer(kernel_shape, bias_shape,
                               {"input": channels, "output": self.filters})

    def _node_shape(self, rank, nodes):
        # One z per example and channel, shared over the spatial positions.
        if self.data_format == "channels_last":
            return [-1, 1, 1, nodes]
        return [-1, nodes, 1, 1]

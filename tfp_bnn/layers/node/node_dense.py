"""Dense layer with random multiplicative nodes (node-based BNN)."""

import keras

from tfp_bnn.layers.node.node_base import NodeLayer
from tfp_bnn.layers._shapes import DenseShapes


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NodeDense(DenseShapes, NodeLayer):
    """Densely connected layer of a node-based BNN (Trinh et al. 2022).

    The kernel U and bias b are ordinary point estimates; the randomness is
    in latent node variables z, one per input feature (`noise="input"`),
    per unit (`"output"`) or both, drawn afresh for every example:

        y = act(z_out * ((z_in * x) @ U + b))

    z has a Gaussian (or Gaussian-plus-normalizing-flow) posterior per
    mixture component, a N(prior_mean, prior_stddev^2) prior, and adds
    kl_weight * KL to the layer's losses; see `tfp_bnn.layers.node.node_base` for
    the posterior, the component assignment and the KL estimator. Inputs of
    rank > 2 share one z per example over their middle axes.

    Args:
        units: positive int, the output dimension.
        activation: activation function or its name, as in `keras.layers.Dense`
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
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True always samples z; at inference z is sampled unless
            mean mode is on (`tfp_bnn.set_mean_mode`), where z = mu_k (or
            NF(mu_k) for flows).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> model = keras.Sequential([keras.Input((8,)),
    ...                           NodeDense(50, activation="relu", num_components=4),
    ...                           NodeDense(1, noise="input")])
    >>> model(np.zeros((3, 8), "float32")).shape
    TensorShape([3, 1])
    """

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 noise="input", posterior=None, flows=None, flow_length=None, num_components=1,
                 prior_mean=1.0, prior_stddev=0.1, entropy_weight=0.0, loc_init_stddev=0.1,
                 scale_init=0.05, kl_weight=None, seed=None, **kwargs):
        super().__init__(
            units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, noise=noise,
            posterior=posterior, flows=flows, flow_length=flow_length,
            num_components=num_components, prior_mean=prior_mean, prior_stddev=prior_stddev,
            entropy_weight=entropy_weight, loc_init_stddev=loc_init_stddev, scale_init=scale_init,
            kl_weight=kl_weight, seed=seed, **kwargs)

    def build(self, input_shape):
        kernel_shape, bias_shape, input_dim = self._dense_shapes(input_shape)
        self._build_node_layer(kernel_shape, bias_shape,
                               {"input": input_dim, "output": self.units})

"""The posteriors of a node-based layer's random nodes: a Gaussian, or a Gaussian through a flow.

`tfp_bnn.layers.NodeDense` and `NodeConv2D` keep their weights deterministic
and draw latent multiplicative node variables z (Trinh et al. 2022,
"Tackling covariate shift with node-based Bayesian neural networks", ICML).
Their `posterior=` argument takes one of these objects, as the variational
layers' `posterior=` takes a `tfp_bnn.posteriors.Posterior`:

    NodeGaussian():  z ~ (1/K) sum_k N(mu_k, diag(sigma_k^2)), closed-form KL
    NodeFlow(flows, length):  z = NF(z0), z0 from that Gaussian mixture, with
        NF a `tfp_bnn.flows.NormalizingFlow` (Rezende & Mohamed 2015) and a
        Monte Carlo KL

The number of components K and the initial mu and sigma are the layer's
arguments (`num_components`, `loc_init_stddev`, `scale_init`); the layer
owns the variables. These objects are configuration only, saved in the
layer's config, so `.keras` files load with `safe_mode=True`. The names
"gaussian" and "flow" stand for `NodeGaussian()` and `NodeFlow()`.
"""

import keras

from tfp_bnn import _validation
from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.flows.normalizing_flow import flow_names
from tfp_bnn.posteriors.flow import FlowPosterior


class NodePosteriorKind(ConfigObject):
    """Base of the node posteriors; `get_node_posterior` resolves to one."""


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NodeGaussian(NodePosteriorKind):
    """A uniform mixture of diagonal Gaussians over the nodes of a site.

    Component k is N(mu_k, diag(sigma_k^2)) with sigma_k = softplus(rho_k);
    the KL to the layer's Gaussian prior is in closed form, averaged over the
    components (see `tfp_bnn.layers.node.node_base`).

    Example:
    >>> layer = tfp_bnn.layers.NodeDense(4, posterior=NodeGaussian(), kl_weight=1 / 100)
    >>> layer(np.ones((2, 3), "float32")).shape
    TensorShape([2, 4])
    """


@keras.saving.register_keras_serializable(package="tfp_bnn")
class NodeFlow(NodePosteriorKind):
    """The Gaussian mixture of `NodeGaussian` pushed through a normalizing flow.

    z = NF(z0) with z0 from the components' Gaussians and NF one
    `tfp_bnn.flows.NormalizingFlow` per site, shared by the components
    (Rezende & Mohamed 2015). The KL is the Monte Carlo estimate
    log q0(z0) - log|det J(z0)| - log p(z) over the draws of the forward pass.

    Args:
        flows: a flow name from `tfp_bnn.flows.FLOWS` or a list of them
            (default "planar").
        length: the number of flow steps, an int >= 0 (default 2); a list of
            names is repeated cyclically. 0 leaves the Gaussian base with a
            Monte Carlo KL.

    Example:
    >>> layer = tfp_bnn.layers.NodeDense(
    ...     4, posterior=NodeFlow(["planar", "radial"], length=2), kl_weight=1 / 100)
    >>> layer(np.ones((2, 3), "float32")).shape
    TensorShape([2, 4])
    """

    def __init__(self, flows="planar", length=2):
        length = _validation.integer("length", length, minimum=0)
        if isinstance(flows, (list, tuple)):
            flows = list(flows)
        flow_names(flows, length)  # ValueError naming `flows`
        self.flows = flows
        self.length = length

    def get_config(self):
        return {"flows": self.flows if isinstance(self.flows, str) else list(self.flows),
                "length": self.length}


NODE_POSTERIORS = {"gaussian": NodeGaussian, "flow": NodeFlow}


def get_node_posterior(identifier):
    """Resolves `identifier` to a `NodeGaussian` or `NodeFlow`.

    Args:
        identifier: a `NodeGaussian` or `NodeFlow`, None (`NodeGaussian()`),
            the name "gaussian" or "flow" (default arguments), a
            `tfp_bnn.posteriors.FlowPosterior` (the `NodeFlow` with its
            `flows` and `length`), or the dict
            `keras.saving.serialize_keras_object` made of one.

    Returns:
        A `NodeGaussian` or `NodeFlow`.

    Raises:
        ValueError naming `posterior` and the value.

    Example:
    >>> get_node_posterior("flow")
    NodeFlow(flows='planar', length=2)
    """
    if identifier is None:
        return NodeGaussian()
    if isinstance(identifier, NodePosteriorKind):
        return identifier
    if isinstance(identifier, FlowPosterior):
        # The weight posterior names the same construction: a Gaussian base
        # through its flow chain (its rho settings do not apply to nodes).
        flows = identifier.flows
        return NodeFlow(flows, len(flow_names(flows, identifier.length)))
    if isinstance(identifier, str) and identifier in NODE_POSTERIORS:
        return NODE_POSTERIORS[identifier]()
    if isinstance(identifier, dict):
        obj = keras.saving.deserialize_keras_object(identifier)
        if isinstance(obj, NodePosteriorKind):
            return obj
    raise ValueError(
        f"`posterior` must be one of {tuple(NODE_POSTERIORS)}, a NodeGaussian or a NodeFlow, "
        f"got {identifier!r}."
    )

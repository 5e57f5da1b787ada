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
        **kwargs: every argument of `keras.layers.Dense` plus `noise`,
            `posterior`, `num_components`, `prior_mean`, `prior_stddev`,
            `flows`, `flow_length`, `entropy_weight`, `loc_init_stddev`,
            `scale_init`, `kl_weight`, `seed` (see `NodeLayer`).

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

    def build(self, input_shape):
        kernel_shape, bias_shape, input_dim = self._dense_shapes(input_shape)
        self._build_node_layer(kernel_shape, bias_shape,
                               {"input": input_dim, "output": self.units})

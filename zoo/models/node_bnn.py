"""Node-based Bayesian networks for the 8x8 digits (Trinh et al. 2022, seed 001).

The weights are point estimates; every layer multiplies its input nodes by
latent variables z ~ q(z) with prior N(1, s^2), one draw per example. With
`posterior="flow"` the node posterior is a diagonal Gaussian pushed through
planar flows, so it can be skewed or multimodal; the KL of each layer is
then the Monte Carlo estimate with the flows' log-det-Jacobian correction.
Sizes are those of `zoo.models.digits`, so the covariate-shift comparison
(`zoo.experiments.covariate_shift`) is between networks of one shape:

    MLP: Flatten -> NodeDense 128 relu -> NodeDense 128 relu -> NodeDense 10
    CNN: NodeConv2D 16 -> MaxPool -> NodeConv2D 32 -> Flatten -> NodeDense 64
         -> NodeDense 10

Defaults, after Trinh et al. (2022): noise on input nodes, K = 4 mixture
components (each example of a batch is assigned one; prediction averages
over components and samples), prior N(1, s^2) on z, node noise starting
at sigma = 0.3, and their entropy-weighted objective KL - gamma H. The
four ready models (`node_bnn_mlp_flow` etc.) take s and gamma from
`TUNED`, chosen per model by `zoo.experiments.node_bnn_tuning` on corrupted digits
held out of the training set (never on the test images; BENCHMARKS.md).

Example:
>>> model = node_bnn_mlp(num_train=1437, posterior="flow", seed=0)
"""

import keras

from tfp_bnn import layers as bnn_layers
from zoo.models.digits import INPUT_SHAPE
from zoo.models.digits import CNN_DENSE_UNITS
from zoo.models.digits import CNN_FILTERS
from zoo.models.digits import LEARNING_RATE
from zoo.models.digits import MLP_UNITS
from zoo.models.digits import NUM_CLASSES
from zoo.models.digits import _check_common
from zoo.models.digits import _cnn
from zoo.models.digits import _compile
from zoo.models.digits import _glorot
from zoo.models.digits import _positive_int

NUM_COMPONENTS = 4
PRIOR_STDDEV = 0.5
FLOW_LENGTH = 2
# Trinh et al.'s entropy-weighted objective KL - gamma * H and a node noise
# that starts wide: both keep the node posterior from collapsing to a point,
# which is what buys robustness under covariate shift (BENCHMARKS.md).
ENTROPY_WEIGHT = 5.0
SCALE_INIT = 0.3
# Prior width s and entropy weight gamma of each ready model: the lowest mean
# validation NLL over corruptions at intensities 3-5 on the grid of
# zoo.experiments.node_bnn_tuning (seed 0; table in BENCHMARKS.md).
TUNED = {
    ("mlp", "flow"): {"prior_stddev": 0.5, "entropy_weight": 10.0},
    ("mlp", "gaussian"): {"prior_stddev": 0.5, "entropy_weight": 10.0},
    ("cnn", "flow"): {"prior_stddev": 0.25, "entropy_weight": 10.0},
    ("cnn", "gaussian"): {"prior_stddev": 0.5, "entropy_weight": 5.0},
}


def _node_kwargs(num_train, posterior, num_components, prior_stddev, flow_length,
                 entropy_weight, seed, index, noise="input", scale_init=SCALE_INIT):
    return {
        "noise": noise,
        "scale_init": scale_init,
        "posterior": posterior,
        "num_components": num_components,
        "prior_mean": 1.0,
        "prior_stddev": prior_stddev,
        "flows": "planar",
        "flow_length": flow_length,
        "entropy_weight": entropy_weight,
        "kl_weight": None if num_train is None else 1.0 / num_train,
        "kernel_initializer": _glorot(seed, index),
        "seed": 1000 * seed + 10 * index,
    }


def node_bnn_mlp(num_train=None, posterior="flow", hidden_units=MLP_UNITS,
                 num_components=NUM_COMPONENTS, prior_stddev=PRIOR_STDDEV,
                 flow_length=FLOW_LENGTH, entropy_weight=ENTROPY_WEIGHT,
                 learning_rate=LEARNING_RATE, seed=0):
    """A compiled node-BNN MLP (NodeDense layers) for [n, 8, 8, 1] digits.

    Args:
        num_train: N, for kl_weight = 1/N (None: set by a `KLScheduler`).
        posterior: "flow" (Gaussian base + planar flows) or "gaussian".
        hidden_units: widths of the hidden layers.
        num_components: K mixture components of the node posterior.
        prior_stddev: s of the N(1, s^2) prior on the node variables.
        flow_length: planar flows per layer (posterior="flow").
        entropy_weight: gamma of the entropy-weighted objective KL - gamma H.
        learning_rate: Adam's learning rate.
        seed: int >= 0.

    Returns:
        A compiled `keras.Model` to [n, 10] logits.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)
    hidden_units = tuple(_positive_int("hidden_units", units) for units in hidden_units)
    args = (num_train, posterior, num_components, prior_stddev, flow_length, entropy_weight,
            seed)
    inputs = keras.Input(shape=INPUT_SHAPE, name="image")
    hidden = keras.layers.Flatten()(inputs)
    for index, units in enumerate(hidden_units):
        hidden = bnn_layers.NodeDense(units, activation="relu", name=f"dense_{index}",
                                      **_node_kwargs(*args, index))(hidden)
    outputs = bnn_layers.NodeDense(NUM_CLASSES, name="logits",
                                   **_node_kwargs(*args, len(hidden_units)))(hidden)
    return _compile(keras.Model(inputs, outputs, name=f"node_bnn_mlp_{posterior}"),
                    learning_rate)


def node_bnn_cnn(num_train=None, posterior="flow", filters=CNN_FILTERS,
                 dense_units=CNN_DENSE_UNITS, num_components=NUM_COMPONENTS,
                 prior_stddev=PRIOR_STDDEV, flow_length=FLOW_LENGTH,
                 entropy_weight=ENTROPY_WEIGHT, learning_rate=LEARNING_RATE, seed=0):
    """A compiled node-BNN CNN (NodeConv2D + NodeDense) for [n, 8, 8, 1] digits.

    Arguments as `node_bnn_mlp`, with `filters` (the two convolutions') and
    `dense_units` (the hidden Dense layer) instead of `hidden_units`.
    """
    learning_rate = _check_common(num_train, learning_rate, seed)
    args = (num_train, posterior, num_components, prior_stddev, flow_length, entropy_weight,
            seed)

    def conv(count, index):
        return bnn_layers.NodeConv2D(count, 3, padding="same", activation="relu",
                                     name=f"conv_{index}", **_node_kwargs(*args, index))

    def dense(units, index, activation):
        return bnn_layers.NodeDense(units, activation=activation,
                                    name="logits" if activation is None else f"dense_{index}",
                                    **_node_kwargs(*args, index))

    model = _cnn(conv, dense, tuple(filters), dense_units, f"node_bnn_cnn_{posterior}")
    return _compile(model, learning_rate)


def node_bnn_mlp_flow(num_train=None, seed=0, **kwargs):
    """`node_bnn_mlp` with planar-flow node posteriors and the `TUNED` settings."""
    return node_bnn_mlp(num_train=num_train, posterior="flow", seed=seed,
                        **{**TUNED["mlp", "flow"], **kwargs})


def node_bnn_mlp_gaussian(num_train=None, seed=0, **kwargs):
    """`node_bnn_mlp` with Gaussian node posteriors and the `TUNED` settings."""
    return node_bnn_mlp(num_train=num_train, posterior="gaussian", seed=seed,
                        **{**TUNED["mlp", "gaussian"], **kwargs})


def node_bnn_cnn_flow(num_train=None, seed=0, **kwargs):
    """`node_bnn_cnn` with planar-flow node posteriors and the `TUNED` settings."""
    return node_bnn_cnn(num_train=num_train, posterior="flow", seed=seed,
                        **{**TUNED["cnn", "flow"], **kwargs})


def node_bnn_cnn_gaussian(num_train=None, seed=0, **kwargs):
    """`node_bnn_cnn` with Gaussian node posteriors and the `TUNED` settings."""
    return node_bnn_cnn(num_train=num_train, posterior="gaussian", seed=seed,
                        **{**TUNED["cnn", "gaussian"], **kwargs})

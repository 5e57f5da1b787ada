"""Node-based Bayesian networks (Trinh et al. 2022): `node_bnn_mlp`, `node_bnn_cnn`.

The weights are point estimates; every layer multiplies its input nodes by latent variables
z ~ q(z) with prior N(1, s^2), one draw per example. With `posterior="flow"` the node
posterior is a diagonal Gaussian pushed through planar flows, so it can be skewed or
multimodal; the KL of each layer is then the Monte Carlo estimate with the flows'
log-det-Jacobian correction. The shapes are those of `zoo.models.digits`, so the
covariate-shift comparison (`zoo.experiments.covariate_shift`) is between networks of one
shape:

    MLP: Flatten -> NodeDense 128 relu -> NodeDense 128 relu -> NodeDense 10
    CNN: NodeConv2D 16 -> MaxPool -> NodeConv2D 32 -> Flatten -> NodeDense 64
         -> NodeDense 10

Defaults, after Trinh et al. (2022): noise on input nodes, K = 4 mixture components (each
example of a batch is assigned one; prediction averages over components and samples), prior
N(1, s^2) on z, node noise starting at sigma = 0.3, and their entropy-weighted objective
KL - gamma H. Prior width s and entropy weight gamma default to `TUNED`, chosen per
architecture and posterior by `zoo.experiments.node_bnn_tuning` on corrupted digits held out
of the training set (never on the test images; BENCHMARKS.md). `node_bnn_mlp_flow` etc. fix
the posterior. Builder arguments as in `zoo.models._common`.

Example:
>>> import zoo
>>> model = node_bnn_mlp((8,), num_train=927)
>>> model = node_bnn_cnn_flow(**zoo.models.digits.DIGITS, num_train=1437, seed=0)
>>> model.output.shape   # logits of the 10 digits
(None, 10)
"""

import functools

from tfp_bnn import _validation as check
from tfp_bnn import layers as bnn_layers
from tfp_bnn.posteriors import NodeFlow
from tfp_bnn.posteriors import NodeGaussian
from zoo.models import _common
from zoo.models.digits import CNN_FILTERS
from zoo.models.digits import CNN_KERNEL_SIZE
from zoo.models.digits import CNN_POOLS
from zoo.models.digits import CNN_UNITS
from zoo.models import limits

POSTERIORS = ("flow", "gaussian")
NUM_COMPONENTS = 4
FLOW_LENGTH = 2
# A node noise that starts wide, with Trinh et al.'s entropy-weighted objective, keeps the
# node posterior from collapsing to a point, which is what buys robustness under covariate
# shift (BENCHMARKS.md).
SCALE_INIT = 0.3
# Prior width s and entropy weight gamma per (architecture, posterior): the lowest mean
# validation NLL over corruptions at intensities 3-5 on the grid of
# zoo.experiments.node_bnn_tuning (seed 0; table in BENCHMARKS.md).
TUNED = {
    ("mlp", "flow"): {"prior_stddev": 0.5, "entropy_weight": 10.0},
    ("mlp", "gaussian"): {"prior_stddev": 0.5, "entropy_weight": 10.0},
    ("cnn", "flow"): {"prior_stddev": 0.25, "entropy_weight": 10.0},
    ("cnn", "gaussian"): {"prior_stddev": 0.5, "entropy_weight": 5.0},
}


def _settings(architecture, posterior, num_train, seed, num_components, flow_length,
              prior_stddev, entropy_weight):
    """`layer_kwargs(index)`: the arguments of node layer `index`, tuned where not given."""
    check.one_of("posterior", posterior, POSTERIORS)
    limits.check_sizes("num_components", num_components)
    limits.check_sizes("flow_length", flow_length)
    tuned = TUNED[(architecture, posterior)]

    def layer_kwargs(index):
        return {
            "noise": "input", "scale_init": SCALE_INIT,
            "posterior": (NodeFlow("planar", flow_length) if posterior == "flow"
                          else NodeGaussian()),
            "num_components": num_components, "prior_mean": 1.0,
            "prior_stddev": tuned["prior_stddev"] if prior_stddev is None else prior_stddev,
            "entropy_weight": (tuned["entropy_weight"] if entropy_weight is None
                               else entropy_weight),
            "kl_weight": 1.0 / num_train, "kernel_initializer": _common.glorot(seed, index),
            "seed": _common.layer_seed(seed, index)}
    return layer_kwargs


def node_bnn_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                 heteroscedastic=False, hidden_units=None, posterior="flow",
                 prior_stddev=None, entropy_weight=None, num_components=NUM_COMPONENTS,
                 flow_length=FLOW_LENGTH, learning_rate=_common.LEARNING_RATE,
                 decay_steps=None):
    """A compiled node-BNN MLP of `NodeDense` layers.

    Args:
        input_shape, task, num_classes, num_train, seed, heteroscedastic, hidden_units,
            learning_rate, decay_steps: as `zoo.models.bbb.bbb_mlp`.
        posterior: "flow" (Gaussian base + planar flows) or "gaussian".
        prior_stddev: s of the N(1, s^2) prior on the node variables; None for `TUNED`'s.
        entropy_weight: gamma of the objective KL - gamma H; None for `TUNED`'s.
        num_components: K mixture components of the node posterior.
        flow_length: planar flows per layer (posterior="flow").

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    layer_kwargs = _settings("mlp", posterior, num_train, seed, num_components, flow_length,
                             prior_stddev, entropy_weight)

    def make(units, activation, index, name):
        return bnn_layers.NodeDense(units, activation=activation, name=name,
                                    **layer_kwargs(index))

    def layer_weights(fan_in, units):
        # The kernel, and per input node K components of a mean, a scale and the planar
        # flows (3 numbers per flow step); estimated only for ints, NodeDense names any
        # other value.
        weights = _common.dense_weights(fan_in, units)
        if not all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (num_components, flow_length)):
            return weights
        return weights + num_components * fan_in * (2 + 3 * flow_length)
    return _common.mlp(make, f"node_bnn_mlp_{posterior}", input_shape, task, num_classes,
                       heteroscedastic, hidden_units, learning_rate, decay_steps,
                       layer_weights=layer_weights)


def node_bnn_cnn(input_shape, task="classification", num_classes=None, num_train=None, seed=0,
                 heteroscedastic=False, filters=CNN_FILTERS, hidden_units=CNN_UNITS,
                 posterior="flow", prior_stddev=None, entropy_weight=None,
                 num_components=NUM_COMPONENTS, flow_length=FLOW_LENGTH,
                 learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """The CNN of `zoo.models.digits.deterministic_cnn` with `NodeConv2D` and `NodeDense`.

    Arguments as `node_bnn_mlp`, with `filters` as `zoo.models.digits.deterministic_cnn`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    layer_kwargs = _settings("cnn", posterior, num_train, seed, num_components, flow_length,
                             prior_stddev, entropy_weight)

    def conv(count, kernel_size, index, name):
        return bnn_layers.NodeConv2D(count, kernel_size, padding="same", activation="relu",
                                     data_format=_common.IMAGE_DATA_FORMAT, name=name,
                                     **layer_kwargs(index))

    def dense(units, activation, index, name):
        return bnn_layers.NodeDense(units, activation=activation, name=name,
                                    **layer_kwargs(index))
    return _common.convnet(conv, dense, f"node_bnn_cnn_{posterior}", input_shape, task,
                           num_classes, heteroscedastic, filters, CNN_KERNEL_SIZE, CNN_POOLS,
                           hidden_units, learning_rate, decay_steps)


# The four models of the covariate-shift comparison: one builder each, the posterior fixed.
node_bnn_mlp_flow = functools.partial(node_bnn_mlp, posterior="flow")
node_bnn_mlp_gaussian = functools.partial(node_bnn_mlp, posterior="gaussian")
node_bnn_cnn_flow = functools.partial(node_bnn_cnn, posterior="flow")
node_bnn_cnn_gaussian = functools.partial(node_bnn_cnn, posterior="gaussian")

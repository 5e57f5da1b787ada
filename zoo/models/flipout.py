"""Flipout (Wen et al. 2018): `flipout_mlp` and `flipout_lenet`.

Flipout decorrelates the weight noise across a batch, so the gradient variance falls with the
batch size. N(0, 1) prior and closed-form KL unless given otherwise; the posterior starts at
sigma = softplus(-3) ~= 0.05 (`MeanFieldNormal`). Builder arguments as in
`zoo.models._common`.

Example:
>>> model = flipout_lenet((8, 8, 1), task="classification", num_classes=10, num_train=1437)
>>> model.output.shape
(None, 10)
"""

from tfp_bnn import layers as bnn_layers
from tfp_bnn import posteriors
from zoo.models import _common

# LeNet-5 (LeCun et al. 1998) as in TFP's Flipout example: two 5x5 convolutions (6, 16
# filters), each followed by 2x2 max pooling, then Dense 120 and 84.
LENET_FILTERS = (6, 16)
LENET_KERNEL_SIZE = 5
LENET_UNITS = (120, 84)


def flipout_kwargs(num_train, prior, posterior, seed, index):
    """The arguments every Flipout layer `index` of one model takes."""
    return {"kl_weight": 1.0 / num_train, "prior": prior,
            "posterior": posteriors.MeanFieldNormal() if posterior is None else posterior,
            "seed": _common.layer_seed(seed, index)}


def flipout_dense(num_train, prior, posterior, seed):
    """`make_dense` of `zoo.models._common.mlp` for `DenseFlipout` layers."""
    def make(units, activation, index, name):
        return bnn_layers.DenseFlipout(units, activation=activation, name=name,
                                       **flipout_kwargs(num_train, prior, posterior, seed,
                                                        index))
    return make


def flipout_conv(num_train, prior, posterior, seed):
    """`make_conv` of `zoo.models._common.convnet` for `Conv2DFlipout` layers."""
    def make(filters, kernel_size, index, name):
        return bnn_layers.Conv2DFlipout(filters, kernel_size, padding="same",
                                        activation="relu", name=name,
                                        data_format=_common.IMAGE_DATA_FORMAT,
                                        **flipout_kwargs(num_train, prior, posterior, seed,
                                                         index))
    return make


def flipout_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                heteroscedastic=False, hidden_units=None, prior=None, posterior=None,
                learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """A compiled MLP of `DenseFlipout` layers.

    Args:
        input_shape, task, num_classes, num_train, seed, heteroscedastic, hidden_units,
            learning_rate, decay_steps: as `zoo.models.bbb.bbb_mlp`.
        prior: a `tfp_bnn.priors.Prior` for every weight; None for N(0, 1).
        posterior: a location-scale `tfp_bnn.posteriors.Posterior`; None for
            `MeanFieldNormal()`.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    name = "flipout_mlp_heteroscedastic" if heteroscedastic else "flipout_mlp"
    return _common.mlp(flipout_dense(num_train, prior, posterior, seed), name, input_shape,
                       task, num_classes, heteroscedastic, hidden_units, learning_rate,
                       decay_steps)


def flipout_lenet(input_shape, task="classification", num_classes=None, num_train=None,
                  seed=0, heteroscedastic=False, filters=LENET_FILTERS, hidden_units=LENET_UNITS,
                  prior=None, posterior=None, learning_rate=_common.LEARNING_RATE,
                  decay_steps=None):
    """LeNet-5 (LeCun et al. 1998) with Flipout in every layer (Wen et al. 2018).

    Conv 5x5 (6) relu -> MaxPool 2 -> Conv 5x5 (16) relu -> MaxPool 2 -> Dense 120 relu ->
    Dense 84 relu -> head, with "same" padding so 8x8 digits fit as well as 28x28 ones.

    Args:
        input_shape: [height, width, channels], at least 4x4.
        filters: the convolutions' filter counts, each followed by pooling.
        hidden_units: widths of the hidden Dense layers.
        others: as `flipout_mlp`.

    Returns:
        A compiled `keras.Model`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    if len(input_shape) != 3 or min(input_shape[:2]) < 4:
        raise ValueError("flipout_lenet needs image inputs [height, width, channels] of at "
                         f"least 4x4, got input_shape {input_shape}.")
    name = "flipout_lenet_heteroscedastic" if heteroscedastic else "flipout_lenet"
    return _common.convnet(
        flipout_conv(num_train, prior, posterior, seed),
        flipout_dense(num_train, prior, posterior, seed), name, input_shape, task, num_classes,
        heteroscedastic, filters, LENET_KERNEL_SIZE, None, hidden_units,
        learning_rate, decay_steps)

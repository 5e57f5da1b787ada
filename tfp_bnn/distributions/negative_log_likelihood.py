"""The loss of a model whose output is a distribution: -log p(y)."""

import keras

from tfp_bnn.distributions.carrier import DISTRIBUTION_TYPES
from tfp_bnn.distributions.carrier import attach
from tfp_bnn.distributions.carrier import distribution_of
from tfp_bnn.distributions.carrier import value_of


def _rank(x):
    """The static rank of `x`, None where TensorFlow does not know it."""
    shape = x.shape
    return shape.rank if hasattr(shape, "rank") else len(shape)


def _aligned(y_true, value):
    """`y_true` with the rank of one sample of the output, as Keras aligns targets."""
    y_true = keras.ops.convert_to_tensor(y_true)
    rank, want = _rank(y_true), _rank(value)
    if rank is not None and want is not None:
        if rank == want - 1 and value.shape[-1] == 1:
            return keras.ops.expand_dims(y_true, -1)
        if rank == want + 1 and y_true.shape[-1] == 1:
            return keras.ops.squeeze(y_true, -1)
    return y_true


# Registered, so that a model compiled with it saves and loads (safe_mode=True).
@keras.saving.register_keras_serializable(package="tfp_bnn")
def negative_log_likelihood(y_true, y_pred):
    """-log p(y_true) under the distribution `y_pred` carries, per example.

    The function form of `NegativeLogLikelihood`; the same as TFP's
    `lambda y, rv_y: -rv_y.log_prob(y)`.

    Args:
        y_true: targets, shaped like one sample of the distribution (or
            with one axis of size 1 more or less, aligned as Keras does);
            cast to the distribution's floating dtype.
        y_pred: the output of a tfp_bnn distribution layer (on JAX, in an
            eager call, the distribution it returned).

    Returns:
        A tensor of -log p(y_true), one value per example (the batch shape).

    Example:
    >>> layer = tfp_bnn.layers.IndependentNormal(1)
    >>> y_pred = layer(np.zeros((2, 2), "float32"))   # loc 0, scale softplus(0)
    >>> negative_log_likelihood(np.zeros((2, 1)), y_pred).numpy().round(4)
    array([0.5524, 0.5524], dtype=float32)
    """
    distribution = distribution_of(y_pred)
    y = _aligned(y_true, value_of(y_pred))
    dtype = distribution.dtype
    if dtype is not None and keras.backend.is_float_dtype(keras.backend.standardize_dtype(dtype)):
        y = keras.ops.cast(y, dtype)
    return -distribution.log_prob(y)


# Registered under its own name: tfp_bnn.metrics.NegativeLogLikelihood (a
# streaming classification metric) holds "tfp_bnn>NegativeLogLikelihood".
@keras.saving.register_keras_serializable(package="tfp_bnn", name="NegativeLogLikelihoodLoss")
class NegativeLogLikelihood(keras.losses.Loss):
    """Negative log-likelihood of the targets under the model's output distribution.

    The loss for models ending in a tfp_bnn distribution layer
    (`IndependentNormal`, `Categorical`, `DistributionLambda`, ...): the
    registered, saveable form of TFP's `negloglik = lambda y, rv_y:
    -rv_y.log_prob(y)`. With the default reduction it is the mean NLL over
    the batch, the data term of tfp_bnn's per-example objective
    (mean NLL + KL / N).

    Args:
        reduction: as in `keras.losses.Loss`; the default
            "sum_over_batch_size" is the mean over the batch.
        name: the loss' name.
        dtype: the dtype of the loss computation, as in `keras.losses.Loss`.

    Call arguments:
        y_true: targets, shaped like one sample of the output distribution
            (Keras' rank alignment applies: (batch,) for (batch, 1) outputs).
        y_pred: the output of a tfp_bnn distribution layer.

    Returns:
        The reduced NLL.

    Example:
    >>> x = np.random.rand(16, 3).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
    ...                           tfp_bnn.layers.IndependentNormal(1)])
    >>> model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    >>> history = model.fit(x, y, epochs=1, verbose=0)
    """

    def __init__(self, reduction="sum_over_batch_size", name="negative_log_likelihood",
                 dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if isinstance(y_pred, DISTRIBUTION_TYPES):
            # An eager JAX output is the distribution, which Keras' Loss would try to
            # convert to a tensor: its value goes in, carrying it.
            y_pred = attach(keras.ops.copy(value_of(y_pred)), y_pred)
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        return negative_log_likelihood(y_true, y_pred)

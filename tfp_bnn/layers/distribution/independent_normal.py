"""Independent Normal output distribution (TFP's `IndependentNormal`)."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import ParamsSize
from tfp_bnn.layers.distribution.distribution_lambda import independent


def reshaped_halves(params, event_shape):
    """Splits the last axis of `params` in two and reshapes each to batch + event shape."""
    params = keras.ops.convert_to_tensor(params)
    shape = tuple(keras.ops.shape(params)[:-1]) + tuple(event_shape)
    first, second = keras.ops.split(params, 2, axis=-1)
    return keras.ops.reshape(first, shape), keras.ops.reshape(second, shape)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentNormal(EventShapeDistribution):
    """Normal distribution with independent outputs, loc and softplus scale from the input.

    Keras 3 counterpart of `tfp.layers.IndependentNormal`: the input's last
    axis holds `params_size(event_shape)` = 2 * prod(event_shape) values,
    the first half the locations and the second half scales through
    softplus, as in TFP. Train with `tfp_bnn.losses.NegativeLogLikelihood()`
    (or `lambda y, rv_y: -rv_y.log_prob(y)`).

    Args:
        event_shape: int or tuple, the shape of one output.
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying
        `tfd.Independent(tfd.Normal(loc, softplus(s)), len(event_shape))`.

    Example:
    >>> model = keras.Sequential([keras.Input((4,)),
    ...     keras.layers.Dense(IndependentNormal.params_size(1)), IndependentNormal(1)])
    >>> y = model(np.zeros((2, 4), "float32"))   # a sample, carrying the distribution
    >>> y.shape, y.stddev().numpy().round(4)   # scale softplus(0)
    (TensorShape([2, 1]), array([[0.6931],
           [0.6931]], dtype=float32))
    """

    # The location-scale family of each output (IndependentLogistic swaps it).
    family = tfd.Normal

    @staticmethod
    def params_size(event_shape=()):
        """Number of input values for one output of shape `event_shape`.

        Args:
            event_shape: int or tuple, the shape of one output.

        Returns:
            2 * prod(event_shape): a location and a scale per entry.
        """
        return ParamsSize(2 * EventShapeDistribution._size(
            _validation.shape("event_shape", event_shape)))

    @classmethod
    def new(cls, params, event_shape=(), validate_args=False):
        """The distribution for `params` (TFP's `IndependentNormal.new`).

        Args:
            params: tensor [..., params_size(event_shape)], locations then
                pre-softplus scales.
            event_shape: int or tuple, the shape of one output.
            validate_args: passed to the TFP distributions.

        Returns:
            `tfd.Independent(tfd.Normal(loc, softplus(s)), len(event_shape))`.
        """
        event_shape = _validation.shape("event_shape", event_shape)
        loc, scale = reshaped_halves(params, event_shape)
        return independent(
            cls.family(loc=loc, scale=keras.ops.softplus(scale), validate_args=validate_args),
            event_shape, validate_args)

"""Independent Logistic output distribution (TFP's `IndependentLogistic`)."""

import keras

from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.independent_normal import IndependentNormal


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentLogistic(IndependentNormal):
    """Logistic distribution with independent outputs (heavier tails than a Normal).

    Keras 3 counterpart of `tfp.layers.IndependentLogistic`: the input's
    last axis holds 2 * prod(event_shape) values, locations then scales
    through softplus, as for `IndependentNormal`.

    Args:
        event_shape: int or tuple, the shape of one output (default ()).
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying the Independent Logistic.

    Example:
    >>> head = IndependentLogistic(1)   # after keras.layers.Dense(2)
    >>> y = head(np.zeros((2, 2), "float32"))
    >>> y.shape, y.mean().numpy().ravel()
    (TensorShape([2, 1]), array([0., 0.], dtype=float32))
    """

    family = tfd.Logistic

"""Independent Logistic output distribution (TFP's `IndependentLogistic`)."""

import keras
import tensorflow_probability as tfp

from tfp_bnn.layers.independent_normal import IndependentNormal

tfd = tfp.distributions


@keras.saving.register_keras_serializable(package="tfp_bnn")
class IndependentLogistic(IndependentNormal):
    """Logistic distribution with independent outputs (heavier tails than a Normal).

    Keras 3 counterpart of `tfp.layers.IndependentLogistic`: the input's
    last axis holds 2 * prod(event_shape) values, locations then scales
    through softplus, as for `IndependentNormal`.

    Args:
        event_shape, convert_to_tensor_fn, validate_args, seed: as in
            `IndependentNormal`.

    Call arguments:
        inputs: tensor [..., params_size(event_shape)].

    Returns:
        Tensor [..., *event_shape] carrying the Independent Logistic.

    Example:
    >>> head = IndependentLogistic(1)   # after keras.layers.Dense(2)
    """

    family = tfd.Logistic

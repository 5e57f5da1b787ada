"""Gal's relation between dropout rate, weight decay, prior length-scale and precision.

Dropout training with L2 weight decay is variational inference in a
Bayesian network (Gal and Ghahramani 2016, "Dropout as a Bayesian
approximation", sec. 4 and appendix). A Gaussian prior
with length-scale l on the weights (prior precision l^2), Bernoulli(1 - p)
unit masks (p = dropout rate), N training points and Gaussian observation
noise of precision tau fix the weight decay:

    lambda = l^2 (1 - p) / (2 N tau)        and, solved for tau,
    tau    = l^2 (1 - p) / (2 N lambda)

Here lambda is the factor of `keras.regularizers.L2(lambda)` (which adds
lambda * sum(w^2) to a loss averaged over the batch), as in Gal's UCI
experiments. At prediction the homoscedastic aleatoric variance is 1/tau:
pass `noise_variance=1 / tau` to `tfp_bnn.predict.regression`. The predictive
variance is then 1/tau + the variance of the T sampled outputs (Gal and
Ghahramani 2016, appendix, predictive variance).
"""

from tfp_bnn import _validation as check


def _common_arguments(length_scale, dropout_rate, num_examples):
    """The arguments both directions of Gal's relation share, checked."""
    return (check.positive("length_scale", length_scale),
            check.number("dropout_rate", dropout_rate, low=0.0, high=1.0, high_open=True),
            check.integer("num_examples", num_examples))


def weight_decay(length_scale, dropout_rate, num_examples, precision):
    """L2 factor lambda = l^2 (1 - p) / (2 N tau) for a dropout network.

    Args:
        length_scale: prior length-scale l > 0.
        dropout_rate: p in [0, 1), the probability of dropping a unit.
        num_examples: N, the number of training examples.
        precision: tau > 0, the model precision (inverse noise variance).

    Returns:
        lambda, for `keras.regularizers.L2(lambda)` on the weights after
        each dropout layer.

    Example:
    >>> weight_decay(length_scale=1e-2, dropout_rate=0.05, num_examples=1000, precision=10.0)
    4.75e-09
    """
    length_scale, dropout_rate, num_examples = _common_arguments(
        length_scale, dropout_rate, num_examples)
    precision = check.positive("precision", precision)
    return length_scale**2 * (1.0 - dropout_rate) / (2.0 * num_examples * precision)


def model_precision(length_scale, dropout_rate, num_examples, weight_decay):
    """Model precision tau = l^2 (1 - p) / (2 N lambda) implied by a weight decay.

    Args:
        length_scale: prior length-scale l > 0.
        dropout_rate: p in [0, 1).
        num_examples: N.
        weight_decay: lambda > 0, the `keras.regularizers.L2` factor.

    Returns:
        tau; 1 / tau is the aleatoric variance of the predictive.

    Example:
    >>> model_precision(1e-2, 0.05, 1000, 4.75e-09)
    10.0
    """
    length_scale, dropout_rate, num_examples = _common_arguments(
        length_scale, dropout_rate, num_examples)
    weight_decay = check.positive("weight_decay", weight_decay)
    return length_scale**2 * (1.0 - dropout_rate) / (2.0 * num_examples * weight_decay)

"""Gal's relation between dropout rate, weight decay, prior length-scale and precision.

Dropout training with L2 weight decay is variational inference in a
Bayesian network (Gal and Ghahramani 2016, "Dropout as a Bayesian
approximation", sec. 4 and appendix; seed 004, eqs. 44-46). A Gaussian prior
with length-scale l on the weights (prior precision l^2), Bernoulli(1 - p)
unit masks (p = dropout rate), N training points and Gaussian observation
noise of precision tau fix the weight decay:

    lambda = l^2 (1 - p) / (2 N tau)        and, solved for tau,
    tau    = l^2 (1 - p) / (2 N lambda)

Here lambda is the factor of `keras.regularizers.L2(lambda)` (which adds
lambda * sum(w^2) to a loss averaged over the batch), as in Gal's UCI
experiments. At prediction the homoscedastic aleatoric variance is 1/tau:
pass `noise_variance=1 / tau` to `tfp_bnn.predict.regression`. The predictive
variance is then 1/tau + the variance of the T sampled outputs (seed 004,
eq. 54).
"""

import math
import numbers


def _check(name, value, low=0.0, low_open=True, high=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number, got {value!r}.")
    if (low_open and value <= low) or (not low_open and value < low):
        bound = ">" if low_open else ">="
        raise ValueError(f"`{name}` must be {bound} {low}, got {value!r}.")
    if high is not None and value >= high:
        raise ValueError(f"`{name}` must be < {high}, got {value!r}.")
    return float(value)


def _check_count(num_examples):
    if (isinstance(num_examples, bool) or not isinstance(num_examples, numbers.Integral)
            or num_examples < 1):
        raise ValueError(f"`num_examples` must be an int >= 1, got {num_examples!r}.")


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
    length_scale = _check("length_scale", length_scale)
    dropout_rate = _check("dropout_rate", dropout_rate, low_open=False, high=1.0)
    _check_count(num_examples)
    num_examples = int(num_examples)
    precision = _check("precision", precision)
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
    length_scale = _check("length_scale", length_scale)
    dropout_rate = _check("dropout_rate", dropout_rate, low_open=False, high=1.0)
    _check_count(num_examples)
    num_examples = int(num_examples)
    weight_decay = _check("weight_decay", weight_decay)
    return length_scale**2 * (1.0 - dropout_rate) / (2.0 * num_examples * weight_decay)

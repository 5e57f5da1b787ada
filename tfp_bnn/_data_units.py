"""A model trained on standardised data, wrapped to take raw inputs and answer in data units.

`tfp_bnn.export.with_preprocessing` (re-exported there) puts a
`keras.layers.Normalization` with the training inputs' statistics in front of
the model and, for a regression target, a `tfp_bnn.layers.TargetScaling` after
it. The result is an ordinary functional Keras model: it saves as `.keras`
(safe_mode loads it), predicts with `tfp_bnn.predict` and exports with
`tfp_bnn.export.export_predictive`, which then serves raw rows.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.layers.heads.target_scaling import LAYOUTS
from tfp_bnn.layers.heads.target_scaling import TargetScaling
from tfp_bnn.layers.heads.target_scaling import positive_statistics
from tfp_bnn.layers.heads.target_scaling import statistics
from tfp_bnn.predict.engine import has_distribution_head


def _one_input_shape(model, input_shape):
    """The shape of one example of `model`'s single input (without the batch axis)."""
    if input_shape is not None:
        return check.shape("input_shape", input_shape)
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        inputs = []
    if not inputs:
        raise ValueError("with_preprocessing: the model has no known inputs (a subclassed "
                         "model?); pass `input_shape=` (one example's shape).")
    if len(inputs) != 1:
        raise ValueError(f"with_preprocessing needs a model with one input, got "
                         f"{len(inputs)}.")
    return tuple(inputs[0].shape)[1:]


def _feature_statistics(name, values, width, positive=False):
    values = positive_statistics(name, values) if positive else statistics(name, values)
    if values.size not in (1, width):
        raise ValueError(f"`{name}` must be one number or one per feature ({width}, the "
                         f"inputs' last axis), got {values.size} values.")
    return np.broadcast_to(values, (width,)).copy()


def with_preprocessing(model, *, x_mean, x_std, y_mean=None, y_std=None,
                       output="mean_log_variance", input_shape=None):
    """`model` behind input standardisation and, for a regression target, in its units.

    The returned model computes `model((x - x_mean) / x_std)` and, when
    `y_mean` and `y_std` are given, maps the standardised predictions z to
    y = y_std * z + y_mean part by part (`tfp_bnn.layers.TargetScaling`:
    variances times y_std**2, log variances plus 2 log y_std). Without them
    (a classifier), the outputs pass unchanged.

    Args:
        model: a built Keras model with one input, trained on standardised
            inputs (and targets).
        x_mean: the training inputs' mean: a number, or one per feature (the
            inputs' last axis).
        x_std: the training inputs' standard deviation (> 0), same shape.
        y_mean: the training targets' mean (a number or one per target), or
            None for outputs that stay as they are (class probabilities).
        y_std: the training targets' standard deviation (> 0); given
            together with `y_mean`.
        output: what the model's last axis holds, for a target in data units:
            "mean_log_variance" (the zoo's regression models), "mean"
            (point predictions or sampled values), "mean_variance" or
            "mean_stddev". A distribution head (`tfp_bnn.layers.IndependentNormal`,
            ...) outputs a distribution, not values, and is refused.
        input_shape: one example's shape; needed only for a subclassed model
            (whose inputs Keras does not know).

    Returns:
        A functional `keras.Model` taking raw inputs.

    Raises:
        ValueError: one line naming the argument: a statistic that is not
            finite, a standard deviation <= 0, a shape that does not fit the
            inputs' last axis, `y_mean` without `y_std`, or a model whose
            output cannot be rescaled.

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), tfp_bnn.layers.DenseFlipout(2, seed=0)])
    >>> raw = tfp_bnn.export.with_preprocessing(model, x_mean=[10.0, 0.0], x_std=[2.0, 1.0],
    ...                                        y_mean=35.8, y_std=16.7)
    >>> [layer.__class__.__name__ for layer in raw.layers]
    ['InputLayer', 'Normalization', 'Sequential', 'TargetScaling']
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"with_preprocessing needs a Keras model, got "
                         f"{type(model).__name__}.")
    shape = _one_input_shape(model, input_shape)
    if not shape or shape[-1] is None:
        raise ValueError(f"with_preprocessing needs inputs with a known last axis (the "
                         f"features), got one example of shape {shape}.")
    x_mean = _feature_statistics("x_mean", x_mean, shape[-1])
    x_std = _feature_statistics("x_std", x_std, shape[-1], positive=True)
    if (y_mean is None) != (y_std is None):
        raise ValueError("`y_mean` and `y_std` go together: give both (a regression target "
                         "in its units) or neither (outputs unchanged).")
    scaling = None
    if y_mean is not None:
        output = check.one_of("output", output, LAYOUTS)
        if has_distribution_head(model):
            raise ValueError("with_preprocessing cannot rescale a distribution head's output "
                             "(a distribution, not values): give the model a values head "
                             "([mean, log variance]) or rescale its distribution yourself.")
        scaling = TargetScaling(y_mean, y_std, output=output, name="target_scaling")
    inputs = keras.Input(shape, name="raw_inputs")
    outputs = model(keras.layers.Normalization(axis=-1, mean=x_mean, variance=x_std ** 2,
                                               name="input_scaling")(inputs))
    if scaling is not None:
        if isinstance(outputs, (list, tuple, dict)):
            raise ValueError(f"with_preprocessing rescales a model's single output; this one "
                             f"has {len(outputs)} outputs.")
        outputs = scaling(outputs)
    return keras.Model(inputs, outputs, name=f"{model.name}_in_data_units")

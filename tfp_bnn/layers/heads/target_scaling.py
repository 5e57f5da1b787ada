"""TargetScaling: a regression model's standardised outputs back in the target's units."""

import keras
import numpy as np
from keras import ops

from tfp_bnn import _validation as check

# What the last axis of the outputs holds, and how each part maps to data units
# y = std * z + mean: means (and sampled values) shift and scale, variances scale by
# std**2, standard deviations by std, log variances shift by 2 log std.
LAYOUTS = ("mean", "mean_log_variance", "mean_variance", "mean_stddev")


def statistics(name, values):
    """`values` (a number or a 1-D list) as a finite 1-D float64 array; ValueError naming `name`."""
    values = check.array(name, values)
    return check.vector(name, values.reshape(-1) if values.ndim == 0 else values)


def positive_statistics(name, values):
    """`statistics`, all > 0 (a standard deviation)."""
    values = statistics(name, values)
    if np.any(values <= 0):
        raise ValueError(f"`{name}` must be > 0 (a standard deviation), got "
                         f"{float(values[values <= 0][0])!r} at index "
                         f"{int(np.flatnonzero(values <= 0)[0])}.")
    return values


@keras.saving.register_keras_serializable(package="tfp_bnn")
class TargetScaling(keras.layers.Layer):
    """Maps predictions of a standardised target z = (y - mean) / std to y's units.

    A model trained on standardised targets predicts z; this layer after it
    answers in the data's units, part by part along the last axis:

        mean (or one sampled value)  ->  std * mean + mean_y
        variance                     ->  std**2 * variance
        standard deviation           ->  std * stddev
        log variance                 ->  log variance + 2 log std

    The map is affine per weight sample, so the Monte Carlo predictive of the
    scaled outputs (its mixture mean, epistemic and aleatoric variances) is
    the scaled predictive: put the layer after a Bayesian model and sample as
    before. Distribution-valued outputs are not values to scale; a model
    with a distribution head is refused by `tfp_bnn.export.with_preprocessing`.

    Args:
        mean: the target's training mean, a number or one per target (D).
        std: the target's training standard deviation (> 0), a number or D.
        output: what the last axis holds: "mean" (D means or sampled values),
            "mean_log_variance" ([D means, D log variances], the zoo's
            regression models), "mean_variance" or "mean_stddev".
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: [..., W] standardised outputs: W = D for output="mean", 2D
            otherwise (a number `mean`/`std` applies to every target).

    Returns:
        The outputs in the target's units, same shape and dtype.

    Example:
    >>> layer = TargetScaling(mean=35.8, std=16.7, output="mean_log_variance")
    >>> y = layer(np.array([[1.0, 0.0]], "float32"))   # z = 1, variance 1
    >>> np.round(keras.ops.convert_to_numpy(y), 3)      # 35.8 + 16.7, log(16.7**2)
    array([[52.5  ,  5.631]], dtype=float32)
    """

    def __init__(self, mean=0.0, std=1.0, output="mean", **kwargs):
        super().__init__(**kwargs)
        self.mean = [float(v) for v in statistics("mean", mean)]
        self.std = [float(v) for v in positive_statistics("std", std)]
        if len(self.mean) != len(self.std) and 1 not in (len(self.mean), len(self.std)):
            raise ValueError(f"`mean` and `std` must have one value per target each, got "
                             f"{len(self.mean)} and {len(self.std)}.")
        self.output_kind = check.one_of("output", output, LAYOUTS)
        self._scale = self._shift = None

    def _coefficients(self, width):
        """(scale, shift) [width]: outputs * scale + shift are in the data's units."""
        parts = 1 if self.output_kind == "mean" else 2
        if width is None or width % parts:
            raise ValueError(f"TargetScaling(output={self.output_kind!r}) needs a last axis of "
                             f"{'D values' if parts == 1 else 'an even 2D values'}, got "
                             f"{width}.")
        targets = width // parts
        if max(len(self.mean), len(self.std)) not in (1, targets):
            raise ValueError(f"TargetScaling has statistics for "
                             f"{max(len(self.mean), len(self.std))} targets; the inputs' "
                             f"last axis ({width}) holds {targets}.")
        mean = np.broadcast_to(self.mean, (targets,))
        std = np.broadcast_to(self.std, (targets,))
        second = {"mean": ([], []),
                  "mean_log_variance": (np.ones(targets), 2.0 * np.log(std)),
                  "mean_variance": (std ** 2, np.zeros(targets)),
                  "mean_stddev": (std, np.zeros(targets))}[self.output_kind]
        return (np.concatenate([std, second[0]]).tolist(),
                np.concatenate([mean, second[1]]).tolist())

    def build(self, input_shape):
        self._scale, self._shift = self._coefficients(input_shape[-1])
        self.built = True

    def call(self, inputs):
        scale = ops.convert_to_tensor(self._scale, dtype=self.compute_dtype)
        shift = ops.convert_to_tensor(self._shift, dtype=self.compute_dtype)
        return ops.cast(inputs, self.compute_dtype) * scale + shift

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"mean": list(self.mean), "std": list(self.std),
                       "output": self.output_kind})
        return config


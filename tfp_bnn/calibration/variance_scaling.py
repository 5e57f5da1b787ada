"""Variance recalibration for regression: the predicted noise variance scaled by a fitted
factor per output (sigma scaling, Levi et al. 2022, "Evaluating and calibrating uncertainty
prediction in regression tasks", Sensors 22(15); Kuleshov et al. 2018 recalibrate the CDF
instead).

The layer follows a heteroscedastic regression head whose outputs are [means, log
variances] (`tfp_bnn.layers.HeteroscedasticRegression`, `tfp_bnn.predict.regression`'s
output="mean_log_variance") and adds log c_d^2 to output d's log variance. For a Bayesian
network it scales each Monte Carlo sample's noise variance, so the predictive's aleatoric
part is c^2 times the model's and its epistemic part (the spread of the sampled means)
stays; the fit minimises the NLL of that Monte Carlo mixture (`_objective`). For one
sample (a deterministic network) the minimum is c_d^2 = mean_i (y_id - mu_id)^2 / sigma_id^2.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.calibration import _objective


def _sampled_outputs(outputs, name="outputs"):
    values = check.array(name, outputs)
    if values.ndim == 2:
        values = values[None]
    if values.ndim != 3 or values.shape[-1] % 2 or 0 in values.shape:
        raise ValueError(f"`{name}` must be [N, 2 D] or [S, N, 2 D] (means, then log "
                         f"variances), got shape {values.shape}.")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"`{name}` has NaN or infinite values.")
    return values


@keras.saving.register_keras_serializable(package="tfp_bnn")
class VarianceScaling(keras.layers.Layer):
    """Scales a regression head's noise variance by a fitted c_d^2 per output.

    Args:
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: [..., 2 D]: D means, then D log variances.

    Returns:
        [..., 2 D]: the same means, log variances + log c^2.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> outputs = np.stack([rng.normal(size=400), np.zeros(400)], axis=-1)  # sigma 1
    >>> y = outputs[:, 0] + 2.0 * rng.normal(size=400)                      # noise sd 2
    >>> layer = tfp_bnn.calibration.VarianceScaling().fit(outputs, y)
    >>> 3.0 < float(layer.variance_factor[0]) < 5.0    # c^2 near 4
    True
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fit_result = None

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None or width % 2:
            raise ValueError("VarianceScaling needs an even, known last axis (D means, D log "
                             f"variances), got input shape {tuple(input_shape)}.")
        self._num_outputs = int(width) // 2
        self.log_variance_factor = self.add_weight(
            name="log_variance_factor", shape=(self._num_outputs,), initializer="zeros",
            trainable=False)

    @property
    def variance_factor(self):
        """c^2 per output, a NumPy array [D]."""
        return np.exp(keras.ops.convert_to_numpy(self.log_variance_factor))

    def call(self, inputs):
        x = keras.ops.convert_to_tensor(inputs, self.compute_dtype)
        means, log_variances = keras.ops.split(x, 2, axis=-1)
        shift = keras.ops.cast(self.log_variance_factor, x.dtype)
        return keras.ops.concatenate([means, log_variances + shift], axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def fit(self, outputs, y, max_iterations=_objective.MAX_ITERATIONS):
        """Fits c^2 on held-out outputs by minimising the NLL of their predictive.

        Args:
            outputs: the head's held-out outputs [N, 2 D], or [S, N, 2 D] Monte Carlo
                samples (an equal mixture, as `tfp_bnn.predict.regression` forms it).
            y: held-out targets [N, D] (or [N] for D = 1), in the outputs' units.
            max_iterations: L-BFGS iterations, at most.

        Returns:
            self, with `fit_result` = {"nll_before", "nll_after", "iterations",
            "converged"}.
        """
        values = _sampled_outputs(outputs)
        width = values.shape[-1] // 2
        y = check.array("y", y).astype(np.float64)
        if y.ndim == 1:
            y = y[:, None]
        if y.shape != (values.shape[1], width):
            raise ValueError(f"`y` must be [{values.shape[1]}, {width}] (or "
                             f"[{values.shape[1]}] for one output), got shape {y.shape}.")
        if not np.all(np.isfinite(y)):
            raise ValueError("`y` has NaN or infinite values.")
        max_iterations = check.integer("max_iterations", max_iterations)
        if not self.built:
            self.build((None, 2 * width))
        elif self._num_outputs != width:
            raise ValueError(f"`outputs` have {width} outputs; this layer was built for "
                             f"{self._num_outputs}.")
        means, log_variances = values[..., :width], values[..., width:]

        def objective(theta):
            return _objective.regression_nll(theta, means, log_variances, y)

        start = np.zeros(width)
        before, _ = objective(start)
        theta, after, iterations, converged = _objective.minimize(objective, start,
                                                                  max_iterations)
        self.log_variance_factor.assign(theta)
        self.fit_result = {"nll_before": before, "nll_after": after,
                           "iterations": iterations, "converged": converged}
        return self

    def fit_predictive(self, model, x, y, num_samples=100, batch_size=None):
        """`fit` on the Monte Carlo samples of `model`'s outputs at held-out inputs `x`.

        Args:
            model: a regression model with [means, log variances] outputs.
            x: held-out inputs.
            y: their targets (as `fit` takes them).
            num_samples: T of `tfp_bnn.predict.sample` (1 for a deterministic model).
            batch_size: inputs per traced call (default min(N, 1024)).

        Returns:
            self, fitted (see `fit`).
        """
        from tfp_bnn.predict import sampling  # prediction imports layers, not back
        return self.fit(sampling.sample(model, x, num_samples, batch_size=batch_size), y)

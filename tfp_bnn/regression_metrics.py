"""A Keras metric for networks that output [means, log variances].

`tfp_bnn.layers.HeteroscedasticRegression` (and `HomoscedasticNoise`)
return 2 * units columns, the means followed by s = log sigma^2. Keras'
`RootMeanSquaredError` on that output averages the squared errors of both
halves, log variances included, and silently reports a number that is no
RMSE of anything. `MeanRMSE` scores the means only:

    RMSE = sqrt( sum_i w_i sum_u (y_iu - mean_iu)^2 / sum_i w_i units )

Re-exported as `tfp_bnn.metrics.MeanRMSE`.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MeanRMSE(keras.metrics.Metric):
    """Root mean squared error of the mean columns of a [means, log variances] output.

    Accumulates over batches inside compiled train and test steps, like
    `keras.metrics.RootMeanSquaredError`; with sample weights it is the
    weighted RMSE (pass it in `weighted_metrics`). Computes in float32 at
    least (float16 squares overflow past 256).

    Args:
        name: name of the metric.
        dtype: dtype of the metric's result and state (float32 default).

    Call arguments:
        y_true: targets of shape (batch, units), or (batch,) for units == 1.
        y_pred: outputs of shape (batch, 2 * units): means, then log
            variances.
        sample_weight: None or per-example weights of shape (batch,) or
            (batch, 1).

    Returns:
        `result()`: the RMSE of the means over every example seen since the
        last `reset_state()`, a scalar tensor.

    Example:
    >>> metric = tfp_bnn.metrics.MeanRMSE()
    >>> metric.update_state([1.0, 2.0], [[1.0, 5.0], [4.0, -3.0]])   # [mean, log variance]
    >>> float(metric.result())   # sqrt((0^2 + 2^2) / 2), the log variances left out
    1.4142135381698608
    >>> x, y = np.random.rand(8, 3).astype("float32"), np.random.rand(8).astype("float32")
    >>> model = keras.Sequential([keras.Input((3,)), tfp_bnn.layers.HeteroscedasticRegression(1)])
    >>> model.compile(optimizer="adam", loss=tfp_bnn.losses.GaussianNLL(),
    ...               metrics=[tfp_bnn.metrics.MeanRMSE()])
    >>> loss, rmse = model.evaluate(x, y, verbose=0)
    """

    def __init__(self, name="mean_rmse", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.squared_error_sum = self.add_variable(shape=(), initializer="zeros",
                                                   name="squared_error_sum")
        self.weight_sum = self.add_variable(shape=(), initializer="zeros", name="weight_sum")

    def _compute_dtype(self):
        dtype = keras.backend.standardize_dtype(self.dtype)
        return dtype if dtype in ("float32", "float64") else "float32"

    def update_state(self, y_true, y_pred, sample_weight=None):
        dtype = self._compute_dtype()
        y_pred = ops.cast(ops.convert_to_tensor(y_pred), dtype)
        size = y_pred.shape[-1] if len(y_pred.shape) else None
        if size is None or size % 2:
            raise ValueError(
                "MeanRMSE expects `y_pred` with a known, even last axis [means, log "
                f"variances], got shape {tuple(y_pred.shape)}."
            )
        units = size // 2
        mean = y_pred[..., :units]
        y_true = ops.cast(ops.convert_to_tensor(y_true), dtype)
        if len(y_true.shape) == len(mean.shape) - 1:
            y_true = ops.expand_dims(y_true, -1)
        squared = ops.square(y_true - mean)
        weights = ops.ones_like(squared)
        if sample_weight is not None:
            sample_weight = ops.cast(ops.convert_to_tensor(sample_weight), dtype)
            if len(sample_weight.shape) == len(mean.shape) - 1:
                sample_weight = ops.expand_dims(sample_weight, -1)
            weights = weights * sample_weight
        self.squared_error_sum.assign_add(
            ops.cast(ops.sum(squared * weights), self.squared_error_sum.dtype))
        self.weight_sum.assign_add(ops.cast(ops.sum(weights), self.weight_sum.dtype))

    def result(self):
        return ops.sqrt(ops.divide_no_nan(self.squared_error_sum, self.weight_sum))

    def reset_state(self):
        self.squared_error_sum.assign(0.0)
        self.weight_sum.assign(0.0)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}

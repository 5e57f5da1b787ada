"""Regression head predicting a mean and a log variance per output.

Kendall and Gal (2017) let the network predict its own noise level,
[y_hat, sigma^2] = f(x), and train it with the Gaussian
NLL written in s = log sigma^2, which `tfp_bnn.losses.GaussianNLL`
implements. This head is the last layer of such a network.
"""

import math

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.layers.heads import _projection_head

PARAMETERIZATIONS = ("scale", "log_variance")
# sigma >= 1e-3 by default under "scale": s >= 2 log(1e-3) ~ -13.8.
_DEFAULT_MIN_SCALE = 1e-3
# exp(-100 / 2) ~ 2e-22: smaller floors vanish next to float32 softplus values.
_SMALLEST_MIN_LOG_VARIANCE = -100.0


def split_mean_log_variance(outputs):
    """Splits a head's outputs [means, log variances] into (mean, s).

    `tfp_bnn.losses.gaussian_nll` takes the two along a last axis of size 2,
    so for `units` > 1 stack them per output and sum the per-output NLLs
    (the outputs are independent Gaussians given x):

        mean, s = split_mean_log_variance(y_pred)
        nll = keras.ops.sum(gaussian_nll(y_true, keras.ops.stack([mean, s], -1)), -1)

    with `y_true` of shape (batch, units). For `units` == 1 the head's output
    already is [mean, s] and `GaussianNLL()` applies directly.

    Args:
        outputs: tensor whose last axis (of even size 2 * units) holds the
            means followed by the log variances.

    Returns:
        (mean, s), each of shape `outputs.shape[:-1] + (units,)`.

    Example:
    >>> outputs = np.array([[1.0, 2.0, 0.0, np.log(4.0)]], "float32")   # 2 units
    >>> mean, log_var = split_mean_log_variance(outputs)
    >>> mean.numpy(), np.exp(0.5 * log_var)   # means, noise standard deviations
    (array([[1., 2.]], dtype=float32), array([[1., 2.]], dtype=float32))
    """
    outputs = ops.convert_to_tensor(outputs)
    size = outputs.shape[-1] if len(outputs.shape) else None
    if size is None or size % 2:
        raise ValueError(
            "`outputs` must have a known, even last axis [means, log variances], "
            f"got shape {tuple(outputs.shape)}."
        )
    units = size // 2
    return outputs[..., :units], outputs[..., units:]


@keras.saving.register_keras_serializable(package="tfp_bnn")
class HeteroscedasticRegression(keras.layers.Layer):
    """Heteroscedastic regression head: a mean and s = log sigma^2 per output.

    One inner projection maps the features to 2 * units raw values: the
    means, then one raw noise value r per output, turned into s = log sigma^2
    (Kendall and Gal 2017) by `parameterization`:

        "scale" (default):   sigma = sigma_min + softplus(r),  s = 2 log sigma
        "log_variance":      s = r   (Kendall and Gal's unbounded s)

    Why "scale" is the default: with unstandardized data (targets in the
    hundreds, inputs in the thousands, as in most tutorials) the raw values
    start at +-1000 and move by tens per Adam step; read as s = r that is
    exp(+-1000) and the NLL overflows to inf and NaN. Read as a standard
    deviation, r moves sigma on the scale of the targets, as it moves the
    mean; sigma >= sigma_min keeps exp(-s) <= 1 / sigma_min^2, so the NLL and
    its gradients are finite for every finite input. On standardized data
    both train alike. The raw noise columns of the projection's kernel (its
    posterior mean for a Bayesian projection) start at zero, so the head
    starts homoscedastic at sigma = sigma_min + softplus(bias) rather than
    with an input-dependent sigma of the inputs' arbitrary scale. Models
    saved before this option existed load with "log_variance", as trained.
    A Bayesian projection stays finite on such data too, but its weight
    noise grows with the features (noise std ~ weight std * |features|), so
    it trains slowly until the inputs are standardized.

    Soft bounds on s, with nonzero gradients everywhere:

        "scale":         sigma_min = exp(min_log_variance / 2)  (default 1e-3);
                         with max:  s = max - softplus(max - s)
        "log_variance":  min and max:  s = min + (max - min) * sigmoid(r)
                         min only:     s = min + softplus(r)
                         max only:     s = max - softplus(-r)

    Under a mixed-precision policy the head computes in float32 and returns
    float32, as Keras advises for output layers: a float16 projection
    overflows from 65504 and exp(s) from s ~ 11.

    Train with `tfp_bnn.losses.GaussianNLL` (eq. 66 plus its constant) when
    units == 1; for units > 1 see `split_mean_log_variance`; score the mean
    with `tfp_bnn.metrics.MeanRMSE`. A Bayesian projection adds its KL term
    through its weight regularizer; it appears in the model's `losses` and thus in the
    fitted objective, mean NLL + kl_weight * KL with kl_weight = 1/N.

    Args:
        units: positive int, the number of regression outputs.
        projection: "dense" (`keras.layers.Dense`), "flipout"
            (`tfp_bnn.layers.DenseFlipout`) or "reparameterization"
            (`tfp_bnn.layers.DenseReparameterization`).
        min_log_variance: finite number or None, the lower bound of s; under
            "scale" at least -100 (None: 2 log 1e-3).
        max_log_variance: finite number or None, the upper bound of s;
            must exceed `min_log_variance` when both are given.
        parameterization: "scale" (default) or "log_variance", see above.
        **kwargs: passed to the projection (kernel_initializer,
            use_bias, kl_weight, prior, posterior, seed, ...), except
            `units` and `activation`, which the head fixes. `name`, `dtype`
            and `trainable` belong to the head.

    Call arguments:
        inputs: tensor of rank >= 2, last axis the features.
        training: passed to the projection.

    Returns:
        Tensor of shape `inputs.shape[:-1] + (2 * units,)`:
        [means (units), log variances (units)], in the compute dtype (float32
        under mixed precision).

    Example:
    >>> n = 1000   # training examples
    >>> model = keras.Sequential([keras.Input((8,)),
    ...                           keras.layers.Dense(32, activation="relu"),
    ...                           HeteroscedasticRegression(1, projection="flipout",
    ...                                                     kl_weight=1.0 / n)])
    >>> model.compile(optimizer="adam", loss=tfp_bnn.losses.GaussianNLL(),
    ...               metrics=[tfp_bnn.metrics.MeanRMSE()])
    >>> model(np.zeros((4, 8), "float32")).shape   # [mean, log variance]
    TensorShape([4, 2])
    """

    def __init__(self, units, projection="dense", min_log_variance=None,
                 max_log_variance=None, parameterization="scale", **kwargs):
        own, projection_kwargs = _projection_head.split_layer_kwargs(kwargs)
        super().__init__(**own)
        # Inputs reach the float32 projection uncast: a float16 cast of
        # finite float32 features could overflow before the head sees them.
        self.autocast = False
        self.units = _validation.integer("units", units)
        self.parameterization = _validation.one_of("parameterization", parameterization,
                                                   PARAMETERIZATIONS)
        self.min_log_variance = _validation.number("min_log_variance", min_log_variance,
                                                   allow_none=True)
        self.max_log_variance = _validation.number("max_log_variance", max_log_variance,
                                                   allow_none=True)
        if (parameterization == "scale" and self.min_log_variance is not None
                and self.min_log_variance < _SMALLEST_MIN_LOG_VARIANCE):
            raise ValueError(
                f"`min_log_variance` must be >= {_SMALLEST_MIN_LOG_VARIANCE} with "
                f"parameterization='scale', got {min_log_variance!r}."
            )
        if (self.min_log_variance is not None and self.max_log_variance is not None
                and not self.min_log_variance < self.max_log_variance):
            raise ValueError(
                f"`min_log_variance` must be < `max_log_variance`, got "
                f"min_log_variance={min_log_variance!r}, "
                f"max_log_variance={max_log_variance!r}."
            )
        self.projection = projection
        # The projection computes in float32 whatever the head's policy.
        policy = self.dtype_policy
        if policy.compute_dtype != policy.variable_dtype:
            policy = keras.DTypePolicy(policy.variable_dtype)
        self.projection_layer = _projection_head.make_projection(projection, 2 * units, policy,
                                                 projection_kwargs)
        self._projection_kwargs = projection_kwargs
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        self.projection_layer.build(input_shape)
        if self.parameterization == "scale":
            self._zero_noise_columns()

    def _zero_noise_columns(self):
        """Sets the kernel (posterior mean) columns of the raw noise values to 0."""
        layer = self.projection_layer
        kernel = getattr(layer, "kernel_params", None)
        kernel = layer.kernel if kernel is None else kernel[0]
        if tuple(kernel.shape)[-1:] != (2 * self.units,):  # not a [in, 2 units] mean
            return
        mask = ops.concatenate([ops.ones((self.units,)), ops.zeros((self.units,))], axis=0)
        kernel.assign(kernel * ops.cast(mask, kernel.dtype))

    def _log_variance(self, raw):
        low, high = self.min_log_variance, self.max_log_variance
        if self.parameterization == "scale":
            floor = _DEFAULT_MIN_SCALE if low is None else math.exp(0.5 * low)
            log_var = 2.0 * ops.log(floor + ops.softplus(raw))
            if high is not None:
                log_var = high - ops.softplus(high - log_var)
            return log_var
        if low is not None and high is not None:
            return low + (high - low) * ops.sigmoid(raw)
        if low is not None:
            return low + ops.softplus(raw)
        if high is not None:
            return high - ops.softplus(-raw)
        return raw

    def call(self, inputs, training=None):
        outputs = self.projection_layer(inputs, training=training)
        mean = outputs[..., : self.units]
        log_var = self._log_variance(outputs[..., self.units:])
        return ops.concatenate([mean, log_var], axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (2 * self.units,)

    def compute_output_spec(self, inputs, training=None):
        # The output is the projection's: float32 under a mixed policy.
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self.projection_layer.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "projection": self.projection,
                "min_log_variance": self.min_log_variance,
                "max_log_variance": self.max_log_variance,
                "parameterization": self.parameterization,
            }
        )
        config.update(_projection_head.projection_kwargs_config(self.projection_layer,
                                                                self._projection_kwargs))
        return config

    @classmethod
    def from_config(cls, config):
        # Configs written before `parameterization` existed meant s = r.
        config = dict(config)
        config.setdefault("parameterization", "log_variance")
        return super().from_config(config)

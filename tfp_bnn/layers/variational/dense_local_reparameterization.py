"""Dense layer with the local reparameterization trick."""

import keras
from keras import ops

from tfp_bnn import noise
from tfp_bnn.layers.variational._dense_base import BayesianDenseBase


# Floor on the pre-activation variance: keeps sqrt's gradient finite for an
# all-zero input row (padding); far below any variance that matters, and a
# normal number in the variance's dtype (float32 or float64, see below).
_VARIANCE_FLOOR = 1e-12


def _variance_dtype(dtype):
    """The dtype of the pre-activation variance: at least float32.

    In float16, x^2 overflows for |x| >= 256 while scale^2 underflows to 0
    for scale < 2.4e-4 (rho < -8.3), so x^2 @ scale^2 became inf * 0 = NaN
    (and inf for merely large inputs), and small posterior scales lost their
    noise altogether. The mean x @ loc has no squares and stays in `dtype`.
    """
    return "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"


@keras.saving.register_keras_serializable(package="tfp_bnn")
class DenseLocalReparameterization(BayesianDenseBase):
    """Densely connected layer with local reparameterization (Kingma et al., 2015).

    Keras 3 counterpart of TFP's `DenseLocalReparameterization` (tf_keras only). With a
    factorised Gaussian kernel, the pre-activation of each example is
    Gaussian: mean x @ loc and variance x^2 @ scale^2. The layer samples that
    directly, one independent draw per example and unit:

        y_n = x_n @ loc + sqrt(x_n^2 @ scale^2) * eps_n

    which has the same marginal distribution per example as sampling a kernel
    for that example, with lower-variance gradients. The Monte Carlo KL
    estimator uses one extra posterior sample of the kernel.

    Args:
        units: positive int, the output dimension.
        activation: activation function or its name, as in `keras.layers.Dense`
            (default None: linear).
        use_bias: whether the layer adds a bias (default True).
        kernel_initializer: initializer of the kernel's posterior mean
            (default "glorot_uniform").
        bias_initializer: initializer of the bias (of its posterior mean with
            `bayesian_bias=True`), default "zeros".
        kernel_regularizer: regularizer of the kernel's posterior mean.
        bias_regularizer: regularizer of the bias (of its posterior mean with
            `bayesian_bias=True`).
        activity_regularizer: regularizer of the layer's output.
        kernel_constraint: constraint on the kernel's posterior mean.
        bias_constraint: constraint on the bias (on its posterior mean with
            `bayesian_bias=True`).
        posterior: a location-scale `tfp_bnn.posteriors.Posterior` (w = loc +
            scale * eps, e.g. `MeanFieldNormal`), its registered name, or None
            for `MeanFieldNormal()`.
        prior: a `tfp_bnn.priors.Prior`, its registered name, or None for
            N(0, 1).
        kl_weight: the weight of this layer's KL in the loss, >= 0, usually 1/N
            for N training examples; None leaves it at 1.0 until a
            `tfp_bnn.callbacks.KLScheduler` sets it (with a warning if training
            starts with it unset).
        kl_estimator: "analytic" (closed-form KL, needs a prior with one), "mc"
            (one-sample Monte Carlo log q(w) - log p(w) at the weights of the
            forward pass, Blundell et al. 2015) or "auto" (analytic where TFP
            has it, else Monte Carlo; the default).
        bayesian_bias: if True the bias gets a posterior and a prior too; the
            default False keeps a deterministic bias, as TFP does.
        seed: int or None; seeds the weight noise and the initial weights.
        **kwargs: base layer keyword arguments (`name`, `dtype`, `trainable`,
            ...); TFP's argument names (`kernel_prior_fn`, ...) are refused with
            a message naming their replacement.

    Call arguments:
        inputs: tensor of rank >= 2, last axis the input dimension.
        training: True draws noise (always); at inference the layer samples
            unless mean mode is on (`tfp_bnn.set_mean_mode`).

    Returns:
        Tensor of shape `inputs.shape[:-1] + (units,)`.

    Example:
    >>> layer = DenseLocalReparameterization(4, kl_weight=1 / 1000, seed=0)
    >>> layer(np.ones((2, 3), "float32")).shape
    TensorShape([2, 4])
    """

    requires_location_scale = True

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 posterior=None, prior=None, kl_weight=None, kl_estimator="auto",
                 bayesian_bias=False, seed=None, **kwargs):
        super().__init__(
            units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
            posterior=posterior, prior=prior, kl_weight=kl_weight, kl_estimator=kl_estimator,
            bayesian_bias=bayesian_bias, seed=seed, **kwargs)

    def predictive_samples(self, num_samples):
        """Nothing to draw ahead: the noise is per output, drawn in the call.

        Args:
            num_samples: S, unused.

        Returns:
            None.
        """
        return None

    def _sampled_call(self, inputs, context):
        # Each row of a sample-tiled batch gets its own pre-activation noise,
        # which is exactly an independent kernel sample per row and unit; a
        # Bayesian bias joins that noise (a sum of independent Gaussians) so
        # that it too is drawn per row.
        return self._variational_call(inputs, training=False, bias_per_row=True)

    def _variational_call(self, inputs, training, bias_per_row=False):
        dtype = self.compute_dtype
        noise_scale = self._noise_scale(training)
        seeds = self._call_seeds()
        draw = self._draw(self.kernel_params, seeds[0], with_noise=False)
        loc, scale = self.posterior.loc_scale(draw.prepared)
        mean = ops.matmul(inputs, ops.cast(loc, dtype))
        var_dtype = _variance_dtype(dtype)
        variance = ops.matmul(ops.square(ops.cast(inputs, var_dtype)),
                              ops.cast(ops.square(scale), var_dtype))
        if bias_per_row and self.bias_params is not None:
            bias_loc, bias_scale = self.posterior.loc_scale(
                self.posterior.prepare(self.bias_params))
            variance = variance + ops.cast(ops.square(bias_scale), var_dtype)
            bias, bias_draw = ops.cast(bias_loc, dtype), None
        else:
            bias, bias_draw = self._bias_value(noise_scale, seeds[1])
        stddev = ops.cast(ops.sqrt(ops.maximum(variance, ops.cast(_VARIANCE_FLOOR, var_dtype))),
                          dtype)
        eps = noise.normal(noise.shape_of(mean), dtype, seeds[2])
        outputs = mean + stddev * self._scaled(eps, noise_scale)
        if not bias_per_row:
            self._add_kl(inputs, training, draw, bias_draw)
        return self._finish(outputs, bias)

"""Classification head with Gaussian logits: aleatoric uncertainty for softmax.

Kendall and Gal (2017, sec. 3.3) put a Gaussian on the logits,
u ~ N(f, diag(sigma^2)), with f and sigma^2 predicted per example, and fit
the class probabilities integrated over u, estimated by Monte Carlo:

    p(y = c | x) ~= (1/T) sum_t softmax(f + sigma * eps_t)_c,  eps_t ~ N(0, I)

This head returns the log of that average, so its outputs are normalised
log-probabilities.
"""

import math

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn.layers.heads import _projection_head


@keras.saving.register_keras_serializable(package="tfp_bnn")
class HeteroscedasticClassification(keras.layers.Layer):
    """Heteroscedastic classification head: Monte Carlo softmax of Gaussian logits.

    An inner projection gives 2 * num_classes values per example, the logit
    means f and log variances s = log sigma^2. The head draws T =
    `num_samples` logit vectors u_t = f + exp(s / 2) * eps_t and returns

        log p_c = logsumexp_t log_softmax(u_t)_c - log T,

    the log of the Monte Carlo average of the softmax, computed without
    leaving log space (finite for |f| ~ 1e3 and |s| ~ 50; s is not clipped,
    so only s > ~170, where exp(s / 2) * eps overflows float32, breaks it).
    As s -> -inf the output tends to log_softmax(f).

    Training: the outputs are normalised log-probabilities, and softmax of
    a log-probability vector is that vector's exp, so

        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    on the head's output is exactly Kendall and Gal's heteroscedastic loss
    -log (1/T) sum_t softmax(u_t)_y (their sec. 3.3).

    Noise is drawn in training and at inference: the aleatoric spread is
    part of the predictive distribution. `tfp_bnn.set_mean_mode` switches a
    Bayesian projection to its posterior means but leaves the logit noise
    on. Every example gets its own draws, so copies of one input stacked
    along the batch axis are independent Monte Carlo samples; combine them
    by averaging exp(outputs) (log-mean-exp), not the log-probabilities.
    A call holds num_samples * rows * num_classes logits in memory.

    Args:
        num_classes: int >= 2.
        num_samples: int >= 1, the logit draws T per example and call.
        projection: "dense" (`keras.layers.Dense`), "flipout"
            (`tfp_bnn.layers.DenseFlipout`) or "reparameterization"
            (`tfp_bnn.layers.DenseReparameterization`).
        seed: non-negative int or None; seeds the logit noise and, for a
            Bayesian projection, its weight noise and initial weights.
            Keras does not save random-generator state, so a loaded model
            restarts the noise stream from `seed`.
        return_logit_moments: if True the head returns the concatenated
            [f, log sigma^2] instead of the log-probabilities (inspection).
        **kwargs: passed to the projection (kernel_initializer,
            kl_weight, prior, ...), except `units`, `activation` and `seed`.
            `name`, `dtype` and `trainable` belong to the head (dtype is
            shared). Under mixed precision the projection computes in
            float16 and the Monte Carlo average in float32 (exp(s / 2)
            overflows float16 from s ~ 22).

    Call arguments:
        inputs: tensor of rank >= 2, last axis the features.
        training: passed to the projection; the logit noise is always on.

    Returns:
        Tensor of shape `inputs.shape[:-1] + (num_classes,)` of
        log-probabilities, in the variable dtype (float32 under mixed
        precision, float64 for a float64 head), or
        `inputs.shape[:-1] + (2 * num_classes,)` [f, log sigma^2] (compute
        dtype) if `return_logit_moments`.

    Example:
    >>> model = keras.Sequential([keras.Input((8,)),
    ...                           keras.layers.Dense(32, activation="relu"),
    ...                           HeteroscedasticClassification(10, num_samples=50)])
    >>> model.compile(optimizer="adam",
    ...               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.rand(4, 8).astype("float32")
    >>> probabilities = np.exp(model.predict(x, verbose=0))
    >>> probabilities.shape, np.allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    ((4, 10), True)
    """

    def __init__(self, num_classes, num_samples=100, projection="dense", seed=None,
                 return_logit_moments=False, **kwargs):
        own, projection_kwargs = _projection_head.split_layer_kwargs(kwargs)
        super().__init__(**own)
        self.num_classes = _validation.integer("num_classes", num_classes, minimum=2)
        self.num_samples = _validation.integer("num_samples", num_samples)
        self.seed = _validation.seed(seed, allow_none=True)
        self.return_logit_moments = _validation.boolean("return_logit_moments",
                                                        return_logit_moments)
        self.projection = projection
        inner_kwargs = dict(projection_kwargs)
        if projection in ("flipout", "reparameterization"):
            inner_kwargs["seed"] = seed
        self.projection_layer = _projection_head.make_projection(
            projection, 2 * num_classes, self.dtype_policy, inner_kwargs
        )
        self._projection_kwargs = projection_kwargs
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        self.projection_layer.build(input_shape)

    def call(self, inputs, training=None):
        moments = self.projection_layer(inputs, training=training)
        if self.return_logit_moments:
            return moments
        # The Monte Carlo log-mean-exp runs in the variable dtype (float32
        # under mixed precision, float64 for float64 heads): in float16
        # exp(s / 2) overflows from s ~ 22 (inf logits, NaN log-probabilities),
        # logits of 1e3 keep no fractional digit, and the output is a
        # log-density, which mixed precision keeps in float32.
        moments = ops.cast(moments, self._output_dtype())
        mean = moments[..., : self.num_classes]
        log_var = moments[..., self.num_classes:]
        eps = self._standard_normal(mean)
        logits = mean + ops.exp(0.5 * log_var) * eps
        log_probs = ops.log_softmax(logits, axis=-1)
        return ops.logsumexp(log_probs, axis=0) - math.log(self.num_samples)

    def _standard_normal(self, mean):
        """eps of shape (T,) + mean.shape: independent draws per example."""
        if _backend.is_jax():
            shape = (self.num_samples,) + tuple(ops.shape(mean))
            return keras.random.normal(shape, dtype=mean.dtype, seed=self.seed_generator)
        # tfp_bnn.noise names its algorithm: keras.random's default runs ~11x
        # slower under XLA on CPU (see tfp_bnn/noise.py).
        shape = tf.concat([[self.num_samples], tf.shape(mean)], axis=0)
        return noise.normal(shape, mean.dtype, noise.next_seed(self.seed_generator))

    def _output_dtype(self):
        """The log-probabilities' dtype: the variables' (float32 under mixed precision)."""
        if self.return_logit_moments:
            return self.compute_dtype
        return self.dtype_policy.variable_dtype

    def compute_output_spec(self, inputs, training=None):
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self._output_dtype())

    def compute_output_shape(self, input_shape):
        width = 2 * self.num_classes if self.return_logit_moments else self.num_classes
        return tuple(input_shape[:-1]) + (width,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "num_samples": self.num_samples,
                "projection": self.projection,
                "seed": self.seed,
                "return_logit_moments": self.return_logit_moments,
            }
        )
        config.update(_projection_head.projection_kwargs_config(self.projection_layer,
                                                                self._projection_kwargs))
        return config

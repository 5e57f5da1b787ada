"""SNGP's output layer: a Gaussian process through random Fourier features."""

import math

import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _validation
from tfp_bnn import noise
from tfp_bnn._memory import check_bytes
from tfp_bnn.layers._mixed_precision import float32_variables
from tfp_bnn.layers._tracing import sample_context

LIKELIHOODS = ("regression", "classification")


def mean_field_logits(logits, variance, mean_field_factor=math.pi / 8):
    """Logits scaled for a Gaussian's predictive: logits / sqrt(1 + factor * variance).

    With f ~ N(m, v), E[sigmoid(f)] ~= sigmoid(m / sqrt(1 + pi/8 v)) (MacKay 1992, the
    probit approximation); SNGP applies the same scaling to every class's logit before
    the softmax (Liu et al. 2020, sec. 3.2, the mean-field approximation).

    Args:
        logits: [..., K] posterior-mean logits.
        variance: predictive variance of the logits, [..., K] or [...] (one per example,
            shared by the classes).
        mean_field_factor: lambda >= 0; pi/8 for the probit approximation, 0 leaves the
            logits unchanged.

    Returns:
        The adjusted logits, shape and dtype of `logits`.

    Raises:
        ValueError: if `mean_field_factor` is not a finite number >= 0.

    Example:
    >>> mean_field_logits(np.array([[2.0, -2.0]]), np.array([8 / math.pi])).numpy()
    array([[ 1.41421356, -1.41421356]])
    >>> layer = RandomFeatureGaussianProcess(3, num_inducing=64, likelihood="classification")
    >>> logits, variance = layer(np.random.rand(4, 2), return_variance=True)
    >>> probs = keras.ops.softmax(mean_field_logits(logits, variance))
    >>> probs.shape
    TensorShape([4, 3])
    """
    factor = _validation.number("mean_field_factor", mean_field_factor, low=0.0)
    logits = ops.convert_to_tensor(logits)
    variance = ops.cast(variance, logits.dtype)
    if len(variance.shape) == len(logits.shape) - 1:
        variance = ops.expand_dims(variance, -1)
    return logits / ops.sqrt(1.0 + factor * variance)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class RandomFeatureGaussianProcess(keras.layers.Layer):
    """A Gaussian-process output layer with a Laplace posterior (SNGP, Liu et al. 2020).

    Keras 3 counterpart of edward2's `RandomFeatureGaussianProcess`. The inputs h
    (optionally layer-normalised) meet D = `num_inducing` fixed random Fourier features
    (Liu et al. 2020, eq. 7)

        phi(h) = sqrt(2 / D) cos(h W + b),  W ~ N(0, 1 / lengthscale^2),  b ~ U(0, 2 pi)

    so that phi(h)^T phi(h') ~= exp(-|h - h'|^2 / (2 lengthscale^2)) (Rahimi & Recht
    2007), and a trainable beta [D, units] gives the logits (or means) phi @ beta (eq. 8).
    beta has the prior N(0, I): the ridge penalty `l2_regularization * sum(beta^2)` is a
    kernel regularizer, so the layer trains with a plain `model.fit`. With Keras's
    per-example mean losses the MAP of that prior is `l2_regularization = ridge_penalty / N`
    for the mean squared error and `ridge_penalty / (2 N)` for the cross-entropy
    (N training examples).

    The posterior of beta is the Laplace approximation N(beta_MAP, Sigma) with one
    covariance shared by the outputs (eq. 9, the ridge as edward2 has it):

        P = ridge I + sum_i w_i phi_i phi_i^T,    Sigma = ridge * P^-1

    w_i = 1 for regression, p_i (1 - p_i) for classification (p the sigmoid of a single
    logit; with K > 1 classes the largest softmax probability, edward2's approximation).
    For regression with noise variance sigma^2 = ridge this is exact Bayesian linear
    regression on the features, i.e. the exact GP posterior for the random-feature kernel:
    far from the data phi^T Sigma phi returns to phi^T phi ~= 1, the prior variance.

    The layer adds to P in every training call (gradient-free). With `momentum=None` the
    sum is exact: add `tfp_bnn.callbacks.ResetCovariance()` to `fit` so that P holds the
    last epoch's examples only (the features move while the network trains). With a
    `momentum` m in (0, 1), P <- ridge I + m (P - ridge I) + (1 - m) Phi^T W Phi / B per
    batch of B: edward2's `gp_cov_momentum` moving average of one example's precision,
    except that the ridge stays (edward2 lets it decay with m^steps, and P then loses
    rank and its Cholesky factor fails).

    Spectral normalisation of the hidden layers (SNGP's other half) is
    `tfp_bnn.layers.SpectralNormalization(layer, norm_multiplier=0.95)`.

    Prediction: a plain call returns the posterior-mean outputs phi beta_MAP.
    `return_variance=True` also returns the predictive variance phi^T Sigma phi, for
    `mean_field_logits`. Inside `tfp_bnn.predict` (a sample trace of S samples) tile s of
    the rows gets weight sample s, beta_s ~ N(beta_MAP, Sigma):
    `tfp_bnn.predict.classification(..., output="logits")` and
    `tfp_bnn.predict.regression(..., output="mean")` then give the Monte Carlo
    predictive, the variance of the sampled means being the GP's epistemic variance. As
    for `tfp_bnn.laplace.LaplaceDense`, the layer draws its own samples per call, so input
    chunks meet different (equally distributed) samples; in mean mode
    (`tfp_bnn.set_mean_mode`) every sample is beta_MAP. Under mixed precision the layer
    computes in float32 (cos(h W + b) in float16 is off by ~1e-3 |h W + b|) and returns
    its compute dtype; under float64 everything, P included, is float64.

    Deviations from edward2: `lengthscale` is the kernel's length scale (edward2's
    `gp_kernel_scale` is its square); no trainable output bias by default and no
    constant `gp_output_bias`; the variance is per example ([batch, units], the same in
    every column), not the [batch, batch] covariance matrix; P is factorised in every
    call that needs it (no cached covariance).

    Args:
        units: positive int, the number of outputs (logits or means).
        num_inducing: positive int D, the number of random features. The D x D
            precision matrix and its Cholesky factor, with the output and
            projection weights, must fit in half the machine's memory
            (checked here and at `build`); each factorisation costs O(D^3).
        lengthscale: float > 0, the RBF kernel's length scale.
        normalize_input: apply a `keras.layers.LayerNormalization` to the inputs first.
        likelihood: "regression" (Hessian weights 1) or "classification" (p (1 - p)).
        ridge_penalty: float > 0, the ridge of P (the noise variance for regression).
        momentum: None for the exact sum, or a float in (0, 1) for a moving average.
        l2_regularization: float >= 0, the coefficient of sum(beta^2) in the loss.
        use_bias: add a trainable output bias (a flat prior: it has no variance).
        seed: int or None; seeds the random features, the initial beta and the draws.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, trainable).

    Call arguments:
        inputs: [batch, features].
        training: True adds the batch to the precision matrix.
        return_variance: also return the predictive variance.

    Returns:
        Logits or means [batch, units]; with `return_variance`, the tuple
        (logits, variance), the variance [batch, units].

    Raises:
        ValueError: for a bad argument (named), or inputs not of rank 2.

    Example:
    >>> inputs = keras.Input((2,))
    >>> h = tfp_bnn.layers.SpectralNormalization(keras.layers.Dense(64, "relu"))(inputs)
    >>> logits = RandomFeatureGaussianProcess(3, num_inducing=128, likelihood="classification")(h)
    >>> model = keras.Model(inputs, logits)
    >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> x = np.random.rand(32, 2).astype("float32")
    >>> y = (x[:, 0] > x[:, 1]).astype("int32")
    >>> history = model.fit(x, y, epochs=2, verbose=0,
    ...                     callbacks=[tfp_bnn.callbacks.ResetCovariance()])
    >>> model.predict(x[:5], verbose=0).shape   # mean-field logits at inference
    (5, 3)
    """

    # Has a `sampling` switch that tfp_bnn.set_mean_mode turns (tfp_bnn/modes.py).
    stochastic_layer = True

    def __init__(self, units, num_inducing=1024, lengthscale=1.0, normalize_input=False,
                 likelihood="regression", ridge_penalty=1.0, momentum=None,
                 l2_regularization=1e-6, use_bias=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = _validation.integer("units", units)
        self.num_inducing = _validation.integer("num_inducing", num_inducing)
        self.lengthscale = _validation.positive("lengthscale", lengthscale)
        self.normalize_input = _validation.boolean("normalize_input", normalize_input)
        self.likelihood = _validation.one_of("likelihood", likelihood, LIKELIHOODS)
        self.ridge_penalty = _validation.positive("ridge_penalty", ridge_penalty)
        self.momentum = _validation.number("momentum", momentum, low=0.0, high=1.0,
                                           low_open=True, high_open=True, allow_none=True)
        self.l2_regularization = _validation.number("l2_regularization", l2_regularization,
                                                    low=0.0)
        self.use_bias = _validation.boolean("use_bias", use_bias)
        self.seed = _validation.seed(seed, allow_none=True)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        # The dtype of the layer's arithmetic and of P: float64 under a float64 policy,
        # float32 otherwise (mixed precision included).
        self.work_dtype = "float64" if self.variable_dtype == "float64" else "float32"
        self._check_memory()
        self.input_normalization = (keras.layers.LayerNormalization(dtype=self.work_dtype)
                                    if self.normalize_input else None)
        self.sampling = self.add_weight(name="sampling", shape=(), dtype="float32",
                                        initializer="ones", trainable=False)

    def _check_memory(self, features=0):
        """Refuses sizes whose matrices cannot fit, before any is allocated.

        P and its Cholesky factor are D x D, the output weights D x units and
        the random projection features x D, in `work_dtype` (`features` is
        known at `build`).
        """
        size = self.num_inducing * (2 * self.num_inducing + self.units + features)
        on = f" on {features:,} input features" if features else ""
        check_bytes(size * (8 if self.work_dtype == "float64" else 4),
                    f"A RandomFeatureGaussianProcess with num_inducing={self.num_inducing:,} "
                    f"and units={self.units:,}{on}",
                    "use a smaller `num_inducing` or `units`")

    def _seeded(self, offset):
        return None if self.seed is None else self.seed + offset

    def build(self, input_shape):
        if len(input_shape) != 2 or input_shape[-1] is None:
            raise ValueError(f"RandomFeatureGaussianProcess needs inputs [batch, features] "
                             f"with known features, got shape {tuple(input_shape)}.")
        self._check_memory(int(input_shape[-1]))
        if self.input_normalization is not None:
            self.input_normalization.build(input_shape)
        features = self.num_inducing
        self.random_kernel = self.add_weight(
            name="random_kernel", shape=(input_shape[-1], features), trainable=False,
            initializer=keras.initializers.RandomNormal(stddev=1.0 / self.lengthscale,
                                                        seed=self._seeded(0)))
        self.random_bias = self.add_weight(
            name="random_bias", shape=(features,), trainable=False,
            initializer=keras.initializers.RandomUniform(0.0, 2.0 * math.pi,
                                                         seed=self._seeded(1)))
        regularizer = (keras.regularizers.L2(self.l2_regularization)
                       if self.l2_regularization > 0 else None)
        self.kernel = self.add_weight(
            name="kernel", shape=(features, self.units), regularizer=regularizer,
            initializer=keras.initializers.GlorotUniform(seed=self._seeded(2)))
        self.bias = (self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
                     if self.use_bias else None)
        self.precision = self.add_weight(
            name="precision", shape=(features, features), dtype=self.work_dtype,
            trainable=False, autocast=False,
            initializer=keras.initializers.Identity(gain=self.ridge_penalty))

    # -- features and posterior ---------------------------------------------------
    def _read(self, variable):
        return tf.cast(tf.convert_to_tensor(variable), self.work_dtype)

    def random_features(self, inputs):
        """phi(inputs) = sqrt(2 / D) cos(h W + b), the random Fourier features.

        Args:
            inputs: hidden features h [batch, d] (normalized first with
                `normalize_input=True`).

        Returns:
            A tensor [batch, D] in `work_dtype`, D = `num_inducing`.
        """
        with float32_variables():
            h = tf.cast(inputs, self.work_dtype)
            if self.input_normalization is not None:
                h = tf.cast(self.input_normalization(h), self.work_dtype)
            projected = tf.matmul(h, self._read(self.random_kernel)) + self._read(
                self.random_bias)
        return math.sqrt(2.0 / self.num_inducing) * tf.cos(projected)

    def _ridge_eye(self):
        return self.ridge_penalty * tf.eye(self.num_inducing, dtype=self.work_dtype)

    def reset_covariance(self):
        """Sets the precision matrix back to ridge * I (what `ResetCovariance` calls)."""
        self.precision.assign(self._ridge_eye())

    def _cholesky(self):
        return tf.linalg.cholesky(tf.convert_to_tensor(self.precision))

    def covariance(self):
        """Sigma = ridge * P^-1, the posterior covariance of each output's beta.

        Returns:
            A tensor [D, D] in `work_dtype`.
        """
        eye = tf.eye(self.num_inducing, dtype=self.work_dtype)
        return self.ridge_penalty * tf.linalg.cholesky_solve(self._cholesky(), eye)

    def predictive_variance(self, features):
        """phi^T Sigma phi, the predictive variance of each output's logit.

        Args:
            features: random features phi [batch, D] (`random_features`).

        Returns:
            A tensor [batch] in `work_dtype`.
        """
        features = tf.cast(features, self.work_dtype)
        half = tf.linalg.triangular_solve(self._cholesky(), tf.transpose(features))
        return self.ridge_penalty * tf.reduce_sum(tf.square(half), axis=0)

    def predictive_samples(self, num_samples):
        """S draws beta_s = beta_MAP + sqrt(ridge) L^-T eps, P = L L^T: [S, D, units].

        Their covariance is ridge (L L^T)^-1 = Sigma. In mean mode every draw is beta_MAP.

        Args:
            num_samples: S, an int or a scalar int tensor.

        Returns:
            A tensor [S, D, units].
        """
        size, units = self.num_inducing, self.units
        eps = noise.normal(tf.stack([size, num_samples * units]), self.work_dtype,
                           noise.next_seed(self.seed_generator))
        # One solve for all samples: L^T x = eps, eps's columns the S * units draws.
        deltas = tf.linalg.triangular_solve(self._cholesky(), eps, adjoint=True)
        deltas = tf.transpose(tf.reshape(deltas, tf.stack([size, num_samples, units])),
                              [1, 0, 2])
        scale = math.sqrt(self.ridge_penalty) * tf.cast(self.sampling, self.work_dtype)
        with float32_variables():
            return self._read(self.kernel)[None] + scale * deltas

    def _hessian_weights(self, logits):
        if self.likelihood == "regression":
            return None
        if self.units == 1:
            p = tf.sigmoid(logits[:, 0])
        else:
            p = tf.reduce_max(tf.nn.softmax(logits, axis=-1), axis=-1)
        return p * (1.0 - p)

    def _update_precision(self, features, logits):
        features = tf.stop_gradient(features)
        weights = self._hessian_weights(tf.stop_gradient(logits))
        if weights is not None:
            features = features * tf.sqrt(weights)[:, None]
        batch = tf.matmul(features, features, transpose_a=True)
        if self.momentum is None:
            self.precision.assign_add(batch)
            return
        rows = tf.cast(tf.shape(features)[0], self.work_dtype)
        ridge = self._ridge_eye()
        self.precision.assign(ridge + self.momentum * (self.precision - ridge)
                              + (1.0 - self.momentum) * batch / rows)

    # -- call ---------------------------------------------------------------------
    def call(self, inputs, training=None, return_variance=False):
        features = self.random_features(inputs)
        context = sample_context()
        if context is not None and not training:
            count = context.num_samples
            kernels = context.draws.get(id(self))
            kernels = self.predictive_samples(count) if kernels is None else kernels
            tiles = tf.reshape(features, tf.stack([count, -1, self.num_inducing]))
            outputs = tf.reshape(tf.matmul(tiles, kernels), [-1, self.units])
        else:
            with float32_variables():
                outputs = tf.matmul(features, self._read(self.kernel))
        if self.use_bias:
            with float32_variables():
                outputs = outputs + self._read(self.bias)
        if training:
            self._update_precision(features, outputs)
        result = tf.cast(outputs, self.compute_dtype)
        if not return_variance:
            return result
        variance = tf.cast(self.predictive_variance(features), self.compute_dtype)
        return result, tf.broadcast_to(variance[:, None], tf.shape(result))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.units)

    def compute_output_spec(self, inputs, training=None, return_variance=False):
        logits = keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                   dtype=self.compute_dtype)
        if not return_variance:
            return logits
        return logits, keras.KerasTensor(logits.shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units, "num_inducing": self.num_inducing,
            "lengthscale": self.lengthscale, "normalize_input": self.normalize_input,
            "likelihood": self.likelihood, "ridge_penalty": self.ridge_penalty,
            "momentum": self.momentum, "l2_regularization": self.l2_regularization,
            "use_bias": self.use_bias, "seed": self.seed,
        })
        return config

"""Bayesian transformer regressors, trained by sampling or by moment propagation.

`TokenTransformerRegressor` reads a row of J scalars as J tokens — the
past months of a forecasting window, or the features of a tabular example —
embeds token j as x_j * e_j + c_j (a learned, deterministic, per-position
embedding, so position and feature identity need nothing else), runs one
`tfp_bnn.layers.BayesianTransformerBlock`, pools (the last token for a
forecaster, the mean of the tokens for a table), and ends in a Bayesian
Dense head and a learned homoscedastic noise variance.

Two ways to train the same network (seed 000):

- path="mc": every step draws weights (Flipout or reparameterization), the
  loss is the Gaussian NLL of the sampled prediction plus KL / N;
- path="moments": no sampling; `tfp_bnn.moments` propagates the mean and
  covariance of the activations through the block, and the loss is the
  Gaussian NLL of the `horizon` outputs under the propagated covariance
  plus the noise (the data term of the seed's eq. 13, by Cholesky in full
  mode: `tfp_bnn.losses.MomentGaussianNLL`) plus the closed-form KL / N
  (eq. 12).

Outputs per example: path="mc" and mode "diagonal" give [means (H), log
variances (H)] — for path="mc" the variance is the noise alone and
`tfp_bnn.predict.regression` adds the weight uncertainty by sampling;
path="moments" with mode "full" gives [means (H), covariance (H * H)],
propagated covariance plus noise.
"""

import math
import time

import keras
import numpy as np
import tensorflow as tf

import tfp_bnn
from tfp_bnn import moments
from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.layers.dense_reparameterization import DenseReparameterization
from tfp_bnn.losses import MomentGaussianNLL
from tfp_bnn.predict.regression import RegressionPrediction

PATHS = ("mc", "moments")
POOLINGS = ("last", "mean")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return int(value)


def _choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}, got {value!r}.")
    return value


@keras.saving.register_keras_serializable(package="zoo")
class TokenTransformerRegressor(keras.Model):
    """One Bayesian transformer block over scalar tokens, to a Gaussian prediction.

    Args:
        num_tokens: J, the values per example.
        horizon: H, outputs per example (e.g. the next H months).
        width: model width d (the block's input and output size).
        num_heads: attention heads; key_dim = width // num_heads.
        ff_dim: hidden units of the block's feed-forward network.
        pooling: "last" (forecasting) or "mean" (tabular).
        path: "mc" (sampled weights) or "moments" (propagated moments).
        mode: "diagonal" or "full" covariances for path="moments".
        estimator: "flipout" or "reparameterization" for path="mc".
        relu: "exact" or "taylor" ReLU moments for path="moments".
        seed: int >= 0.

    Call arguments:
        inputs: [B, J] or [B, J, 1] values.

    Returns:
        [B, 2H]: means and log variances (path="mc": the noise variance;
        path="moments", mode "diagonal": noise plus propagated variance), or
        [B, H + H^2]: means and covariance (path="moments", mode "full").
    """

    def __init__(self, num_tokens, horizon=1, width=16, num_heads=2, ff_dim=32, pooling="last",
                 path="mc", mode="diagonal", estimator="flipout", relu="exact", seed=0,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = _positive_int("num_tokens", num_tokens)
        self.horizon = _positive_int("horizon", horizon)
        self.width = _positive_int("width", width)
        self.num_heads = _positive_int("num_heads", num_heads)
        self.ff_dim = _positive_int("ff_dim", ff_dim)
        if self.width % self.num_heads:
            raise ValueError(f"`width` ({width}) must be a multiple of `num_heads` "
                             f"({num_heads}).")
        self.pooling = _choice("pooling", pooling, POOLINGS)
        self.training_path = _choice("path", path, PATHS)
        self.mode = moments.check_mode(mode)
        self.estimator = _choice("estimator", estimator, ("flipout", "reparameterization"))
        self.relu = _choice("relu", relu, ("exact", "taylor"))
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
        self.seed = seed
        init = keras.initializers.RandomNormal(stddev=1.0, seed=seed)
        self.token_scale = self.add_weight(name="token_scale", shape=(num_tokens, width),
                                           initializer=init)
        self.token_shift = self.add_weight(
            name="token_shift", shape=(num_tokens, width),
            initializer=keras.initializers.RandomNormal(stddev=0.1, seed=seed + 1))
        self.block = BayesianTransformerBlock(num_heads=num_heads, ff_dim=ff_dim,
                                              estimator=estimator, seed=seed + 2, name="block")
        self.head = DenseReparameterization(horizon, bayesian_bias=True, seed=seed + 3,
                                            name="head")
        self.log_noise = self.add_weight(name="log_noise", shape=(),
                                         initializer=keras.initializers.Constant(-1.0))

    def build(self, input_shape):
        tokens = (input_shape[0], self.num_tokens, self.width)
        self.block.build(tokens)
        self.head.build((input_shape[0], self.width))
        self.built = True

    # Under mixed_float16 a Model's call reads its variables in float16; the
    # token embedding, noise and moment path stay float32 (the outputs and
    # the Gaussian likelihood are float32), so read them as such.
    def _tokens(self, inputs):
        values = tf.reshape(tf.cast(inputs, "float32"), [-1, self.num_tokens, 1])
        return (values * tf.cast(self.token_scale, "float32")
                + tf.cast(self.token_shift, "float32"))

    def _log_noise(self):
        return tf.cast(self.log_noise, "float32")

    def _noise(self, batch):
        return tf.fill([batch, self.horizon], self._log_noise())

    def call(self, inputs, training=None):
        tokens = self._tokens(inputs)
        batch = tf.shape(tokens)[0]
        if self.training_path == "mc":
            hidden = self.block(tokens, training=training)
            pooled = hidden[:, -1] if self.pooling == "last" else tf.reduce_mean(hidden, axis=1)
            mean = tf.cast(self.head(pooled, training=training), "float32")
            return tf.concat([mean, self._noise(batch)], -1)
        head = self.propagate(tokens)
        for layer in tfp_bnn.bayesian_layers(self):
            self.add_loss(layer.kl_penalty(batch))
        noise = tf.exp(self._log_noise())
        if self.mode == "diagonal":
            return tf.concat([head.mean, tf.math.log(head.variance() + noise)], axis=-1)
        cov = head.full_covariance() + noise * tf.eye(self.horizon)
        return tf.concat([head.mean, tf.reshape(cov, [-1, self.horizon ** 2])], axis=-1)

    def propagate(self, tokens):
        """Moments of the H head outputs ([B, H] mean), without sampling or noise."""
        attention = self.block.attention
        out = moments.transformer_block(
            tokens, self.block.moment_parameters(), num_heads=attention.num_heads,
            key_dim=attention.key_dim, value_dim=attention.value_dim, mode=self.mode,
            epsilon=self.block.epsilon, relu=self.relu)
        pooled = (moments.select_token(out, -1) if self.pooling == "last"
                  else moments.mean_over_tokens(out))
        return moments.dense(pooled, *self.head.posterior_moments())

    def get_config(self):
        config = super().get_config()
        config.update({"num_tokens": self.num_tokens, "horizon": self.horizon,
                       "width": self.width,
                       "num_heads": self.num_heads, "ff_dim": self.ff_dim,
                       "pooling": self.pooling, "path": self.training_path, "mode": self.mode,
                       "estimator": self.estimator, "relu": self.relu, "seed": self.seed})
        return config


def build(num_tokens, path, learning_rate=3e-3, **kwargs):
    """A compiled `TokenTransformerRegressor` (Adam, `MomentGaussianNLL` of its outputs)."""
    model = TokenTransformerRegressor(num_tokens, path=path, **kwargs)
    mode = model.mode if path == "moments" else "diagonal"
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=MomentGaussianNLL(mode=mode))
    model.build((None, num_tokens))
    return model


def train(model, x, y, epochs, batch_size=64, seed=0, validation_data=None):
    """`fit` with KL / N (KLScheduler); returns (History, seconds)."""
    keras.utils.set_random_seed(seed)
    begin = time.perf_counter()
    history = model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0,
                        validation_data=validation_data,
                        callbacks=[KLScheduler(num_examples=len(x))])
    return history, time.perf_counter() - begin


def predictive(model, x, num_samples=100, batch_size=256):
    """The model's predictive distribution and the seconds it took.

    path="mc": `tfp_bnn.predict.regression` with T = `num_samples` weight
    samples (a mixture of T Gaussians per point); path="moments": one
    deterministic pass giving one Gaussian per point.
    """
    begin = time.perf_counter()
    if model.training_path == "mc":
        prediction = tfp_bnn.predict.regression(model, x, num_samples=num_samples,
                                                batch_size=batch_size)
    else:
        outputs = model.predict(x, batch_size=batch_size, verbose=0)
        horizon = model.horizon
        mean = outputs[:, :horizon]
        if model.mode == "diagonal":
            variance = np.exp(outputs[:, horizon:])
        else:
            cov = outputs[:, horizon:].reshape(-1, horizon, horizon)
            variance = np.diagonal(cov, axis1=1, axis2=2)
        prediction = RegressionPrediction(mean[None], variance[None])
    return prediction, time.perf_counter() - begin


def scores(prediction, y, y_shift=0.0, y_scale=1.0, level=0.95):
    """Test log-likelihood (nats per point), RMSE and interval coverage, in data units."""
    rescaled = prediction.rescale(shift=y_shift, scale=y_scale)
    y = np.asarray(y, np.float64) * y_scale + y_shift
    return {"log_likelihood": float(np.mean(rescaled.log_likelihood(y))),
            "rmse": float(rescaled.rmse(y)),
            "coverage": float(rescaled.coverage(y, level))}


def compare(data, num_tokens, epochs, pooling, seed=0, num_samples=100, width=16,
            num_heads=2, ff_dim=32, paths=(("mc", "diagonal"), ("moments", "diagonal")),
            y_shift=0.0, y_scale=1.0):
    """Trains one network per (path, mode) and scores each on the test split.

    Returns:
        list of dicts with `path`, `mode`, `train_seconds`,
        `predict_seconds`, `log_likelihood`, `rmse`, `coverage`.
    """
    rows = []
    for path, mode in paths:
        model = build(num_tokens, path, mode=mode, pooling=pooling, width=width,
                      num_heads=num_heads, ff_dim=ff_dim, seed=seed)
        _, seconds = train(model, data["x_train"], data["y_train"], epochs, seed=seed)
        prediction, predict_seconds = predictive(model, data["x_test"], num_samples)
        row = {"path": path, "mode": mode, "train_seconds": seconds,
               "predict_seconds": predict_seconds,
               **scores(prediction, data["y_test"], y_shift, y_scale)}
        if not all(math.isfinite(row[k]) for k in ("log_likelihood", "rmse")):
            raise FloatingPointError(f"{path}/{mode} training diverged: {row}")
        rows.append(row)
    return rows

"""Bayesian transformer regressors, trained by sampling or by moment propagation.

`TokenTransformerRegressor` reads a row of J scalars as J tokens — the
past months of a forecasting window, or the features of a tabular example —
embeds token j as x_j * e_j + c_j (a learned, deterministic, per-position
embedding, so position and feature identity need nothing else), runs one
`tfp_bnn.layers.BayesianTransformerBlock`, pools (the last token for a
forecaster, the mean of the tokens for a table), and ends in a Bayesian
Dense head and a learned homoscedastic noise variance.

Two ways to train the same network:

- path="mc": every step draws weights (Flipout or reparameterization), the
  loss is the Gaussian NLL of the sampled prediction plus KL / N;
- path="moments": no sampling; `tfp_bnn.moments` propagates the mean and
  covariance of the activations through the block, and the loss is the
  Gaussian NLL of the `horizon` outputs under the propagated covariance
  plus the noise (by Cholesky in full mode:
  `tfp_bnn.losses.MomentGaussianNLL`) plus the closed-form KL / N.

Outputs per example: path="mc" and mode "diagonal" give [means (H), log
variances (H)] — for path="mc" the variance is the noise alone and
`tfp_bnn.predict.regression` adds the weight uncertainty by sampling;
path="moments" with mode "full" gives [means (H), covariance (H * H)],
propagated covariance plus noise.
"""

import keras
from keras import ops

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn import moments
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization
from tfp_bnn.losses import MomentGaussianNLL
from tfp_bnn.modes import kl_layers
from zoo.models import _common
from zoo.models import limits

PATHS = ("mc", "moments")
POOLINGS = ("last", "mean")
# The learned log noise variance starts at -1 (variance 0.37 of a standardised target);
# the LSTM forecaster beside it (`zoo.models.lstm`) starts there too.
INITIAL_LOG_NOISE = -1.0


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
        self.num_tokens = check.integer("num_tokens", num_tokens)
        self.horizon = check.integer("horizon", horizon)
        self.width = check.integer("width", width)
        self.num_heads = check.integer("num_heads", num_heads)
        self.ff_dim = check.integer("ff_dim", ff_dim)
        if self.width % self.num_heads:
            raise ValueError(f"`width` ({width}) must be a multiple of `num_heads` "
                             f"({num_heads}).")
        self.pooling = check.one_of("pooling", pooling, POOLINGS)
        self.training_path = check.one_of("path", path, PATHS)
        self.mode = moments.check_mode(mode)
        self.estimator = check.one_of("estimator", estimator, ("flipout", "reparameterization"))
        self.relu = check.one_of("relu", relu, ("exact", "taylor"))
        self.seed = seed = check.seed(seed)
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
        self.log_noise = self.add_weight(
            name="log_noise", shape=(),
            initializer=keras.initializers.Constant(INITIAL_LOG_NOISE))

    def build(self, input_shape):
        tokens = (input_shape[0], self.num_tokens, self.width)
        self.block.build(tokens)
        self.head.build((input_shape[0], self.width))
        self.built = True

    # Under mixed_float16 a Model's call reads its variables in float16; the
    # token embedding, noise and moment path stay float32 (the outputs and
    # the Gaussian likelihood are float32), so read them as such.
    def _tokens(self, inputs):
        values = ops.reshape(ops.cast(inputs, "float32"), (-1, self.num_tokens, 1))
        return (values * ops.cast(self.token_scale, "float32")
                + ops.cast(self.token_shift, "float32"))

    def _log_noise(self):
        return ops.cast(self.log_noise, "float32")

    def _noise(self, batch):
        return ops.broadcast_to(self._log_noise(), (batch, self.horizon))

    def call(self, inputs, training=None):
        tokens = self._tokens(inputs)
        batch = ops.shape(tokens)[0]
        if self.training_path == "mc":
            hidden = self.block(tokens, training=training)
            pooled = hidden[:, -1] if self.pooling == "last" else ops.mean(hidden, axis=1)
            mean = ops.cast(self.head(pooled, training=training), "float32")
            return ops.concatenate([mean, self._noise(batch)], -1)
        head = self.propagate(tokens)
        for layer in tfp_bnn.bayesian_layers(self):
            self.add_loss(layer.kl_penalty(batch))
        noise = ops.exp(self._log_noise())
        if self.mode == "diagonal":
            return ops.concatenate([head.mean, ops.log(head.variance() + noise)], axis=-1)
        cov = head.full_covariance() + noise * ops.eye(self.horizon)
        return ops.concatenate([head.mean, ops.reshape(cov, (-1, self.horizon ** 2))], axis=-1)

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
    return _common.build_optimizer(model)


def bayesian_transformer(input_shape, task="regression", num_classes=None, num_train=None,
                         seed=0, path="moments", mode="diagonal", width=16, num_heads=2,
                         ff_dim=32, pooling=None, learning_rate=3e-3, decay_steps=None):
    """The registry's Bayesian transformer, trained sampling-free (moment propagation).

    A `TokenTransformerRegressor`: each of the J input values is a token; one
    `BayesianTransformerBlock`; by default path="moments", so training and prediction
    propagate means and (diagonal) covariances instead of sampling weights, with the Gaussian
    NLL under the propagated variance plus the closed-form KL / N. Regression only; inputs
    [J] (a table: mean pooling over tokens) or [J, 1] (a series window: the last token).
    Builder arguments as in `zoo.models._common`.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    if task != "regression":
        raise ValueError("bayesian_transformer is a regression model (it predicts a mean and "
                         f"a variance per example), got task {task!r}.")
    if len(input_shape) == 2 and input_shape[1] != 1 or len(input_shape) > 2:
        raise ValueError("bayesian_transformer reads [J] or [J, 1] inputs (J scalar tokens), "
                         f"got input_shape {input_shape}.")
    for key, value in (("width", width), ("num_heads", num_heads), ("ff_dim", ff_dim)):
        limits.check_sizes(key, value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (width, ff_dim)):
        # Token embedding, attention (query, key, value, output) and the feed-forward pair;
        # TokenTransformerRegressor names any other value.
        limits.check_parameter_count(
            "bayesian_transformer",
            2 * input_shape[0] * width + 4 * _common.dense_weights(width, width)
            + _common.dense_weights(width, ff_dim) + _common.dense_weights(ff_dim, width),
            f"{input_shape[0]} tokens, width {width} and ff_dim {ff_dim}")
    if pooling is None:
        pooling = "last" if len(input_shape) == 2 else "mean"
    model = TokenTransformerRegressor(
        input_shape[0], path=path, mode=mode, width=width, num_heads=num_heads, ff_dim=ff_dim,
        pooling=pooling, seed=seed, name="bayesian_transformer")
    if (model.mode if path == "moments" else "diagonal") != "diagonal":
        raise ValueError("The zoo's bayesian_transformer outputs [mean, log variance]: "
                         f"use mode='diagonal', got {mode!r}.")
    model.build((None,) + input_shape)
    # kl_weight = 1/N from the start, as the functional models set it.
    for layer in kl_layers(model):
        layer.kl_weight.assign(1.0 / num_train)
    return _common.compile_model(model, task, learning_rate, decay_steps,
                                 loss=MomentGaussianNLL(mode="diagonal"))

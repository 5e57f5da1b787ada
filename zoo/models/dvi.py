"""A sampling-free Bayesian MLP: Deterministic Variational Inference, the `dvi_mlp` model.

Wu et al. 2019, "Deterministic Variational Inference for Robust Bayesian
Neural Networks" (ICLR). Every weight has an independent Gaussian posterior
(`tfp_bnn.layers.DenseReparameterization`); instead of sampling weights, the
means and variances of the activations are propagated through
Dense -> ReLU -> ... -> Dense with `tfp_bnn.moments` (`dense` is exact given
independence, `relu` uses the exact moments of a rectified Gaussian unit).
The head gives, per target, m (the mean) and l (the log noise variance), and
the data term is the closed-form expected log-likelihood (Wu et al., sec. 3.2)

    E_q[-log N(y | m, e^l)]
        = 0.5 [log 2 pi + mu_l + exp(-mu_l + S_ll / 2) ((y - mu_m + S_ml)^2 + S_mm)]

for (m, l) jointly Gaussian with means (mu_m, mu_l), variances (S_mm, S_ll)
and covariance S_ml: E[e^-l g(m)] = E[e^-l] E'[g(m)], where E[e^-l] =
exp(-mu_l + S_ll / 2) and, under the density tilted by e^-l, m is Gaussian
with mean mu_m - S_ml and variance S_mm. The objective per example is that
expectation averaged over the batch plus KL(q || p) / N in closed form.

Prediction is one deterministic pass: the moment-matched Gaussian with mean
mu_m and variance S_mm + E[e^l] = S_mm + exp(mu_l + S_ll / 2), output as
[mean, log variance] per target like every zoo regression model.

Deviations from Wu et al.: the prior is a fixed N(0, 1) per weight (the
layers' default) rather than their empirical-Bayes hierarchical prior; in
full mode the ReLU's cross-covariances are the first-order Phi_a Phi_b C_ab
of `tfp_bnn.moments.relu` rather than their series approximation. With one
hidden layer full and diagonal mode agree exactly (a constant input gives the
hidden units independent moments); full mode only adds the covariances a
second hidden layer creates. Mode "diagonal" still keeps Cov[m, l], computed
exactly from the last hidden variances.

Example:
>>> x = np.random.rand(32, 8).astype("float32")
>>> model = dvi_mlp((8,), num_train=927, hidden_units=(16,))   # compiled: fit(x, y) trains it
>>> outputs = model(x)   # one deterministic pass, no sampling
>>> mean, log_variance = outputs[:, 0], outputs[:, 1]
>>> mean.shape
TensorShape([32])
"""

import math

import keras
from tfp_bnn._tf import tf

import tfp_bnn
from tfp_bnn import _validation as check
from tfp_bnn import moments
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization
from tfp_bnn.modes import kl_layers
from zoo.models import _common
from zoo.models import limits

# Full mode keeps a [width, width] covariance per example and, in each dense
# layer, a [fan_in, units] half product: at most 2^22 float32 entries (16 MiB)
# per example, so 512 MiB for a batch of 32.
MAX_FULL_ENTRIES = 2**22
# Moments of one target in the layout `DVIGaussianNLL` reads.
MOMENT_FIELDS = ("mean_m", "mean_l", "var_m", "var_l", "cov_ml")


def expected_gaussian_nll(y, mean_m, mean_l, var_m, var_l, cov_ml):
    """E[-log N(y | m, exp(l))] for jointly Gaussian (m, l), elementwise (Wu et al. 2019).

    0.5 [log 2 pi + mu_l + exp(-mu_l + S_ll / 2) ((y - mu_m + S_ml)^2 + S_mm)], in
    float64: the residual is scaled by exp((-mu_l + S_ll / 2) / 2) before squaring, so
    neither factor overflows before the value itself does.

    Returns:
        float32 tensor of the broadcast shape of the arguments.
    """
    f64 = tf.float64
    y, mean_m, mean_l, var_m, var_l, cov_ml = (
        tf.cast(t, f64) for t in (y, mean_m, mean_l, var_m, var_l, cov_ml))
    log_precision = -mean_l + 0.5 * var_l  # log E[exp(-l)]
    scaled = (y - mean_m + cov_ml) * tf.exp(0.5 * log_precision)
    quadratic = tf.square(scaled) + var_m * tf.exp(log_precision)
    return tf.cast(0.5 * (math.log(2.0 * math.pi) + mean_l + quadratic), tf.float32)


@keras.saving.register_keras_serializable(package="zoo")
class DVIGaussianNLL(keras.losses.Loss):
    """The expected heteroscedastic Gaussian NLL of propagated head moments (Wu et al. 2019).

    Call arguments:
        y_true: targets [batch, D] (or [batch] when D = 1).
        y_pred: [batch, 5D], per target the fields `MOMENT_FIELDS` in blocks of D:
            [mu_m, mu_l, S_mm, S_ll, S_ml] (`DVIRegressor.output_moments`).

    Returns:
        The reduced sum over the D targets of `expected_gaussian_nll`.
    """

    def __init__(self, reduction="sum_over_batch_size", name="dvi_gaussian_nll", dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)

    def call(self, y_true, y_pred):
        width = y_pred.shape[-1]
        if width is None or width % len(MOMENT_FIELDS):
            raise ValueError("DVIGaussianNLL needs a last axis of 5 * D moments "
                             f"{list(MOMENT_FIELDS)}, got shape {tuple(y_pred.shape)}.")
        fields = tf.split(y_pred, len(MOMENT_FIELDS), axis=-1)
        y_true = tf.reshape(y_true, tf.shape(fields[0]))
        return tf.reduce_sum(expected_gaussian_nll(y_true, *fields), axis=-1)


@keras.saving.register_keras_serializable(package="zoo")
class DVIRegressor(keras.Model):
    """A Bayesian MLP trained and evaluated by moment propagation (Wu et al. 2019, ICLR).

    `fit` and `evaluate` score the compiled loss (`DVIGaussianNLL`) on
    `output_moments(x)` rather than on the predictive outputs (`compute_loss`),
    plus the KL / N that `call` adds; `predict` and `call` give the predictive.

    Args:
        hidden_units: widths of the hidden ReLU layers.
        targets: D, the regression targets per example.
        heteroscedastic: True: the head predicts l(x) (2D units); False: D units and
            one learned log noise variance per target.
        mode: "diagonal" or "full" covariance of the hidden units of an example.
        seed: int >= 0: initial weights (layer i draws from `_common.layer_seed`).

    Call arguments:
        inputs: [B, ...] examples (flattened).

    Returns:
        [B, 2D]: predictive means and log variances.
    """

    def __init__(self, hidden_units=_common.REGRESSION_UNITS, targets=1, heteroscedastic=True,
                 mode="diagonal", seed=0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_units = _common.layer_sizes("hidden_units", hidden_units)
        self.targets = check.integer("targets", targets)
        self.heteroscedastic = check.boolean("heteroscedastic", heteroscedastic)
        # Not `mode`: zoo.run.scoring reads a model's `mode` as its output layout.
        self.moment_mode = moments.check_mode(mode)
        self.seed = check.seed(seed)
        self.training_path = "moments"  # one pass gives the predictive (zoo.run.scoring)
        self.hidden = [DenseReparameterization(units, activation="relu", bayesian_bias=True,
                                               seed=_common.layer_seed(self.seed, index),
                                               name=f"dense_{index}")
                       for index, units in enumerate(self.hidden_units)]
        count = len(self.hidden_units)
        self.head = DenseReparameterization(
            self.targets * (2 if self.heteroscedastic else 1), bayesian_bias=True,
            seed=_common.layer_seed(self.seed, count),
            name="mean_log_variance" if self.heteroscedastic else "mean")
        self.log_noise = None
        if not self.heteroscedastic:
            self.log_noise = self.add_weight(name="log_noise", shape=(self.targets,),
                                             initializer=keras.initializers.Zeros())

    def build(self, input_shape):
        self.input_size = math.prod(input_shape[1:])
        width = self.input_size
        for layer in self.hidden:
            layer.build((input_shape[0], width))
            width = layer.units
        self.head.build((input_shape[0], width))
        self.built = True

    def output_moments(self, inputs):
        """[B, 5D]: per target mu_m, mu_l, S_mm, S_ll, S_ml in blocks of D (float32)."""
        x = tf.reshape(tf.cast(inputs, "float32"), [-1, self.input_size])
        hidden = moments.Moments.deterministic(x, self.moment_mode)
        for layer in self.hidden:
            hidden = moments.relu(moments.dense(hidden, *layer.posterior_moments()))
        params = self.head.posterior_moments()
        out = moments.dense(hidden, *params)
        mean, var = out.mean, out.variance()
        d = self.targets
        if not self.heteroscedastic:
            noise = tf.broadcast_to(tf.cast(self.log_noise, "float32"), tf.shape(mean))
            zeros = tf.zeros_like(mean)
            return tf.concat([mean, noise, var, zeros, zeros], axis=-1)
        if self.moment_mode == "full":
            cov = tf.linalg.diag_part(out.full_covariance()[:, :d, d:])
        else:
            # Cov[m_t, l_t] = sum_i M_it M_i(D+t) Var[h_i]: the weights of two units are
            # independent (mean-field), so only the hidden variances couple them.
            cov = tf.matmul(hidden.variance(), params[0][:, :d] * params[0][:, d:])
        return tf.concat([mean[:, :d], mean[:, d:], var[:, :d], var[:, d:], cov], axis=-1)

    def call(self, inputs, training=None):
        fields = tf.split(self.output_moments(inputs), len(MOMENT_FIELDS), axis=-1)
        mean_m, mean_l, var_m, var_l, _ = fields
        batch = tf.shape(mean_m)[0]
        for layer in tfp_bnn.bayesian_layers(self):
            self.add_loss(layer.kl_penalty(batch))
        # log(S_mm + exp(mu_l + S_ll / 2)) in float64: S_mm is 0 in mean mode.
        f64 = tf.float64
        variance = tf.cast(var_m, f64) + tf.exp(tf.cast(mean_l + 0.5 * var_l, f64))
        return tf.concat([mean_m, tf.cast(tf.math.log(variance), "float32")], axis=-1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        # The expected log-likelihood needs S_ml and S_ll, which the predictive lacks.
        # In a traced step the predictive's own ops feed nothing and are pruned.
        return super().compute_loss(x, y, self.output_moments(x), sample_weight, training)

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_units": list(self.hidden_units), "targets": self.targets,
                       "heteroscedastic": self.heteroscedastic, "mode": self.moment_mode,
                       "seed": self.seed})
        return config


def _check_full_mode(input_size, hidden_units):
    """Raises ValueError if full mode needs more than MAX_FULL_ENTRIES floats per example."""
    widths = (input_size,) + hidden_units
    # The covariance of each hidden layer and the half product of the next dense.
    entries = max([w * w for w in hidden_units]
                  + [a * b for a, b in zip(widths[1:-1], widths[2:])])
    if entries > MAX_FULL_ENTRIES:
        raise ValueError(f"dvi_mlp with mode='full' and hidden_units {list(hidden_units)} "
                         f"would keep {entries:,} covariance entries per example (limit "
                         f"{MAX_FULL_ENTRIES:,}); use mode='diagonal' or narrower layers.")


def dvi_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
            hidden_units=_common.REGRESSION_UNITS, heteroscedastic=True, mode="diagonal",
            learning_rate=_common.LEARNING_RATE, decay_steps=None):
    """A compiled `DVIRegressor` (Wu et al. 2019, ICLR): sampling-free Bayesian MLP.

    Mean-field Gaussian weights with an N(0, 1) prior and closed-form KL / num_train;
    means and variances propagated through the ReLU layers (no sampling in training or
    prediction); the expected Gaussian NLL of a heteroscedastic head by default. Builder
    arguments as in `zoo.models._common`; regression only.

    Args:
        hidden_units: hidden-layer widths (default (50,), the UCI protocol).
        heteroscedastic: predict the noise variance per input (default) or learn one.
        mode: "diagonal" or "full" hidden covariances (full pays off from two hidden
            layers on, at memory quadratic in the width).
        learning_rate, decay_steps: Adam and its optional cosine decay.

    Returns:
        A compiled `DVIRegressor` outputting [mean, log variance] per example.
    """
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    if task != "regression":
        raise ValueError("dvi_mlp is a regression model (it predicts a mean and a variance "
                         f"per example), got task {task!r}.")
    hidden_units = _common.layer_sizes("hidden_units", hidden_units)
    heteroscedastic = check.boolean("heteroscedastic", heteroscedastic)
    input_size = math.prod(input_shape)
    widths = (input_size,) + hidden_units + (2 if heteroscedastic else 1,)
    limits.check_parameter_count(
        "dvi_mlp", sum(_common.dense_weights(a, b) for a, b in zip(widths, widths[1:])),
        f"input_shape {input_shape} and hidden_units {list(hidden_units)}")
    if moments.check_mode(mode) == "full":
        _check_full_mode(input_size, hidden_units)
    model = DVIRegressor(hidden_units, heteroscedastic=heteroscedastic, mode=mode, seed=seed,
                         name="dvi_mlp")
    model.build((None,) + input_shape)
    for layer in kl_layers(model):  # kl_weight = 1/N from the start
        layer.kl_weight.assign(1.0 / num_train)
    return _common.compile_model(model, task, learning_rate, decay_steps,
                                 loss=DVIGaussianNLL())

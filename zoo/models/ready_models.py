"""The builders behind `zoo.MODELS`: one call, a compiled Bayesian model.

Every builder is called as

    builder(input_shape, task="regression", num_classes=None, num_train=N, seed=0,
            **overrides)

and returns a compiled `keras.Model`:

- task="regression": outputs [batch, 2] = [mean, s = log noise variance]
  of a standardised target, compiled with `tfp_bnn.losses.GaussianNLL`
  (the bayesian_transformer with `MomentGaussianNLL`, the same quantity for
  its moment outputs). Plain models learn one s for all inputs
  (`tfp_bnn.layers.HomoscedasticNoise`); the `_heteroscedastic` variants
  predict s from x (Kendall and Gal 2017). `tfp_bnn.predict.regression`
  turns either into a predictive mixture.
- task="classification": [batch, num_classes] logits, compiled with
  SparseCategoricalCrossentropy(from_logits=True) and accuracy.

Variational layers carry kl_weight = 1/N, so `fit` minimises the
per-example ELBO, mean NLL + KL / N; a `KLScheduler` keeps it right when
the training set changes. `decay_steps` (e.g. epochs x steps per epoch)
turns on a cosine learning-rate decay to 10% of its start.

Tabular defaults follow the UCI protocol of Hernandez-Lobato and Adams
(2015) and Gal and Ghahramani (2016): one hidden layer of 50 ReLU units.
Images are flattened by the MLPs; `flipout_lenet` keeps their layout.
"""

import math
import numbers

import keras

from tfp_bnn import layers as bnn_layers
from tfp_bnn import mc_dropout
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers._composite import positive_int
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.losses import MomentGaussianNLL
from tfp_bnn.modes import kl_layers
from zoo.run import flags
from zoo.models import node_bnn
from zoo.models import transformer as transformer_models

TASKS = ("regression", "classification")
REGRESSION_UNITS = (50,)
CLASSIFICATION_UNITS = (128, 128)
LEARNING_RATE = 1e-3
# Blundell et al. (2015), sec. 3.3: pi = 1/2, sigma1 = 1, sigma2 = e^-6.
BBB_PRIOR = priors.ScaleMixturePrior(pi=0.5, sigma1=1.0, sigma2=math.exp(-6.0))
# sigma = softplus(-5) ~= 0.007 at the start (Blundell et al. start small too).
BBB_RHO_INIT = -5.0
# Gal and Ghahramani (2016), UCI experiments: p from {0.005, 0.01, 0.05,
# 0.1}, prior length-scale l = 1e-2.
DROPOUT_RATE = 0.05
LENGTH_SCALE = 1e-2
# LeNet-5 (LeCun et al. 1998) as in TFP's Flipout example: two 5x5
# convolutions (6, 16 filters) with 2x2 max pooling, dense 120 and 84.
LENET_FILTERS = (6, 16)
LENET_UNITS = (120, 84)


def _positive_ints(name, values):
    """A tuple of positive ints from a sequence (layer widths, filter counts)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"`{name}` must be a sequence of positive ints, got {values!r}.")
    values = tuple(positive_int(name, value) for value in values)
    if not values:
        raise ValueError(f"`{name}` must list at least one layer size, got an empty sequence.")
    flags.check_sizes(name, values)
    return values


def _dense_weights(fan_in, units):
    return (fan_in + 1) * units


def check_common(input_shape, task, num_classes, num_train, seed):
    """Validates the arguments every builder takes.

    Returns:
        (input_shape as a tuple of ints, num_train, seed) as Python ints.
    """
    try:
        shape = tuple(input_shape)
    except TypeError:
        raise ValueError(f"`input_shape` must be a tuple of positive ints, got "
                         f"{input_shape!r}.") from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0
                        for d in shape):
        raise ValueError(f"`input_shape` must be a non-empty tuple of positive ints, got "
                         f"{input_shape!r}.")
    input_shape = tuple(int(d) for d in shape)
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}, got {task!r}.")
    if task == "classification":
        if (isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral)
                or num_classes < 2):
            raise ValueError("`num_classes` must be an int >= 2 for classification, got "
                             f"{num_classes!r}.")
    elif num_classes is not None:
        raise ValueError(f"`num_classes` is only for classification, got {num_classes!r}.")
    num_train = positive_int("num_train", num_train)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    return input_shape, num_train, int(seed)


def _optimizer(learning_rate, decay_steps):
    if (isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real)
            or not math.isfinite(learning_rate) or learning_rate <= 0):
        raise ValueError(f"`learning_rate` must be a finite number > 0, got {learning_rate!r}.")
    learning_rate = float(learning_rate)
    if decay_steps is not None:
        learning_rate = keras.optimizers.schedules.CosineDecay(
            learning_rate, positive_int("decay_steps", decay_steps), alpha=0.1)
    return keras.optimizers.Adam(learning_rate=learning_rate)


def _compile(model, task, learning_rate, decay_steps, loss=None):
    if task == "classification":
        model.compile(optimizer=_optimizer(learning_rate, decay_steps),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    else:
        model.compile(optimizer=_optimizer(learning_rate, decay_steps),
                      loss=GaussianNLL() if loss is None else loss)
    return model


def _head(dense, hidden, task, num_classes, heteroscedastic):
    """The output layer(s): logits, [mean, learned s] or [mean, s(x)]."""
    if task == "classification":
        return dense(num_classes, None, "logits")(hidden)
    if heteroscedastic:
        return dense(2, None, "mean_log_variance")(hidden)
    mean = dense(1, None, "mean")(hidden)
    return bnn_layers.HomoscedasticNoise(name="noise")(mean)


def _mlp(make_dense, name, input_shape, task, num_classes, heteroscedastic, hidden_units,
         learning_rate, decay_steps, before_dense=None, layer_weights=_dense_weights):
    """Input -> [Flatten] -> hidden Dense layers -> head, compiled.

    `layer_weights(fan_in, units)` estimates a layer's weights; their sum is
    checked against `zoo.run.flags.MAX_PARAMETERS` before any layer is made.
    """
    if hidden_units is None:
        hidden_units = REGRESSION_UNITS if task == "regression" else CLASSIFICATION_UNITS
    hidden_units = _positive_ints("hidden_units", hidden_units)
    outputs = num_classes if task == "classification" else 2 if heteroscedastic else 1
    widths = (math.prod(input_shape),) + hidden_units + (outputs,)
    flags.check_parameter_count(
        name, sum(layer_weights(a, b) for a, b in zip(widths[:-1], widths[1:])),
        f"input_shape {input_shape} and hidden_units {list(hidden_units)}")
    count = iter(range(len(hidden_units) + 1))

    def dense(units, activation, layer_name):
        index = next(count)
        layer = make_dense(units, activation, index, layer_name)

        def apply(tensor):
            if before_dense is not None:
                tensor = before_dense(index)(tensor)
            return layer(tensor)
        return apply

    inputs = keras.Input(shape=input_shape, name="inputs")
    hidden = inputs if len(input_shape) == 1 else keras.layers.Flatten(name="flatten")(inputs)
    for position, units in enumerate(hidden_units):
        hidden = dense(units, "relu", f"dense_{position}")(hidden)
    outputs = _head(dense, hidden, task, num_classes, heteroscedastic)
    model = keras.Model(inputs, outputs, name=name)
    return _compile(model, task, learning_rate, decay_steps)


def bbb_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
            heteroscedastic=False, hidden_units=None, prior=BBB_PRIOR, posterior=None,
            learning_rate=LEARNING_RATE, decay_steps=None):
    """Bayes by Backprop (Blundell et al. 2015): `DenseReparameterization` layers.

    Scale-mixture prior (pi 0.5, sigma1 1, sigma2 e^-6), mean-field Gaussian
    posterior sigma = softplus(rho) starting at rho = -5, and the Monte
    Carlo KL log q(w) - log p(w) at the sampled weights (the mixture has no
    closed form).
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)
    posterior = posterior or posteriors.MeanFieldNormal(rho_init=BBB_RHO_INIT)

    def make(units, activation, index, name):
        return bnn_layers.DenseReparameterization(
            units, activation=activation, prior=prior, posterior=posterior,
            kl_weight=1.0 / num_train, kl_estimator="mc", seed=1000 * seed + 10 * index,
            name=name)
    name = "bbb_mlp_heteroscedastic" if heteroscedastic else "bbb_mlp"
    return _mlp(make, name, input_shape, task, num_classes, heteroscedastic, hidden_units,
                learning_rate, decay_steps)


def flipout_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                heteroscedastic=False, hidden_units=None, prior=None, posterior=None,
                learning_rate=LEARNING_RATE, decay_steps=None):
    """Flipout (Wen et al. 2018): `DenseFlipout` layers, N(0, 1) prior, closed-form KL.

    The posterior starts at sigma = softplus(-3) ~= 0.05 (`MeanFieldNormal`);
    Flipout decorrelates the weight noise across a batch, so the gradient
    variance falls with the batch size.
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)

    def make(units, activation, index, name):
        return bnn_layers.DenseFlipout(
            units, activation=activation, prior=prior,
            posterior=posterior or posteriors.MeanFieldNormal(),
            kl_weight=1.0 / num_train, seed=1000 * seed + 10 * index, name=name)
    name = "flipout_mlp_heteroscedastic" if heteroscedastic else "flipout_mlp"
    return _mlp(make, name, input_shape, task, num_classes, heteroscedastic, hidden_units,
                learning_rate, decay_steps)


def mc_dropout_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                   heteroscedastic=False, hidden_units=None, rate=DROPOUT_RATE,
                   length_scale=LENGTH_SCALE, learning_rate=LEARNING_RATE, decay_steps=None):
    """MC dropout (Gal and Ghahramani 2016): `MCDropout` before every Dense layer.

    As in their UCI code, the inputs are dropped too. The L2 factor on the
    weights after each dropout layer is l^2 (1 - p) / (2 N) (their KL term
    per example; the noise precision tau is learned with the rest rather
    than set by grid search).
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)
    if (isinstance(rate, bool) or not isinstance(rate, numbers.Real)
            or not 0 <= rate < 1):
        raise ValueError(f"`rate` must be a number in [0, 1), got {rate!r}.")
    if (isinstance(length_scale, bool) or not isinstance(length_scale, numbers.Real)
            or not math.isfinite(length_scale) or length_scale <= 0
            or not math.isfinite(float(length_scale) * float(length_scale))):
        raise ValueError("`length_scale` must be a finite number > 0 whose square is finite, "
                         f"got {length_scale!r}.")
    decay = mc_dropout.weight_decay(float(length_scale), float(rate), num_train, 1.0)

    def make(units, activation, index, name):
        return keras.layers.Dense(
            units, activation=activation, kernel_regularizer=keras.regularizers.L2(decay),
            kernel_initializer=keras.initializers.GlorotUniform(seed=1000 * seed + 10 * index),
            name=name)

    def dropout(index):
        return bnn_layers.MCDropout(rate, seed=1000 * seed + 10 * index + 5,
                                    name=f"dropout_{index}")
    name = "mc_dropout_mlp_heteroscedastic" if heteroscedastic else "mc_dropout_mlp"
    return _mlp(make, name, input_shape, task, num_classes, heteroscedastic, hidden_units,
                learning_rate, decay_steps, before_dense=dropout)


def node_bnn_mlp(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                 heteroscedastic=False, hidden_units=None, posterior="flow",
                 prior_stddev=None, entropy_weight=None, num_components=node_bnn.NUM_COMPONENTS,
                 flow_length=node_bnn.FLOW_LENGTH, learning_rate=LEARNING_RATE,
                 decay_steps=None):
    """Node-based BNN (Trinh et al. 2022) with planar-flow node posteriors.

    Point-estimate weights; every layer scales its inputs by latent
    z ~ q(z), K = 4 components, prior N(1, s^2), KL corrected by the flows'
    log-det-Jacobian. Prior width s and entropy weight gamma are
    `zoo.models.node_bnn.TUNED[("mlp", posterior)]` (tuned on held-out corrupted
    digits) unless given; K and the flow length likewise default to
    `zoo.models.node_bnn`'s.
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)
    if posterior not in ("flow", "gaussian"):
        raise ValueError(f"`posterior` must be 'flow' or 'gaussian', got {posterior!r}.")
    flags.check_sizes("num_components", num_components)
    flags.check_sizes("flow_length", flow_length)
    tuned = node_bnn.TUNED[("mlp", posterior)]
    prior_stddev = tuned["prior_stddev"] if prior_stddev is None else prior_stddev
    entropy_weight = tuned["entropy_weight"] if entropy_weight is None else entropy_weight

    def make(units, activation, index, name):
        kwargs = node_bnn._node_kwargs(num_train, posterior, num_components, prior_stddev,
                                       flow_length, entropy_weight, seed, index)
        return bnn_layers.NodeDense(units, activation=activation, name=name, **kwargs)

    def layer_weights(fan_in, units):
        # The kernel, and per input node K components of a mean, a scale and
        # the planar flows (3 numbers per flow step); estimated only for ints,
        # NodeDense names any other value.
        sizes = (num_components, flow_length)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
            return _dense_weights(fan_in, units)
        return _dense_weights(fan_in, units) + num_components * fan_in * (2 + 3 * flow_length)
    return _mlp(make, f"node_bnn_{posterior}", input_shape, task, num_classes,
                heteroscedastic, hidden_units, learning_rate, decay_steps,
                layer_weights=layer_weights)


def flipout_lenet(input_shape, task="classification", num_classes=None, num_train=None,
                  seed=0, heteroscedastic=False, filters=LENET_FILTERS, hidden_units=LENET_UNITS,
                  learning_rate=LEARNING_RATE, decay_steps=None):
    """LeNet-5 (LeCun et al. 1998) with Flipout in every layer (Wen et al. 2018).

    Conv 5x5 (6) relu -> MaxPool 2 -> Conv 5x5 (16) relu -> MaxPool 2 ->
    Dense 120 relu -> Dense 84 relu -> head, with "same" padding so 8x8
    digits fit as well as 28x28 ones. Needs [height, width, channels] inputs
    of at least 4x4.
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)
    if len(input_shape) != 3 or min(input_shape[:2]) < 4:
        raise ValueError("flipout_lenet needs image inputs [height, width, channels] of at "
                         f"least 4x4, got input_shape {input_shape}.")
    filters = _positive_ints("filters", filters)
    hidden_units = _positive_ints("hidden_units", hidden_units)
    channels = (input_shape[2],) + filters
    pooled = 2 ** len(filters)  # "same" pooling halves each side, rounding up
    widths = (math.ceil(input_shape[0] / pooled) * math.ceil(input_shape[1] / pooled)
              * filters[-1],) + hidden_units + (num_classes if task == "classification" else 2,)
    flags.check_parameter_count(
        "flipout_lenet",
        sum(_dense_weights(25 * a, b) for a, b in zip(channels[:-1], channels[1:]))
        + sum(_dense_weights(a, b) for a, b in zip(widths[:-1], widths[1:])),
        f"input_shape {input_shape}, filters {list(filters)} and hidden_units "
        f"{list(hidden_units)}")

    def flipout(cls, index, **kwargs):
        return cls(kl_weight=1.0 / num_train, seed=1000 * seed + 10 * index, **kwargs)

    inputs = keras.Input(shape=input_shape, name="inputs")
    hidden = inputs
    for index, count in enumerate(filters):
        hidden = flipout(bnn_layers.Conv2DFlipout, index, filters=count, kernel_size=5,
                         padding="same", activation="relu", name=f"conv_{index}")(hidden)
        hidden = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{index}")(hidden)
    hidden = keras.layers.Flatten(name="flatten")(hidden)
    offset = len(filters)

    def dense(units, activation, name):
        nonlocal offset
        offset += 1
        return flipout(bnn_layers.DenseFlipout, offset, units=units, activation=activation,
                       name=name)
    for position, units in enumerate(hidden_units):
        hidden = dense(units, "relu", f"dense_{position}")(hidden)
    outputs = _head(dense, hidden, task, num_classes, heteroscedastic)
    name = "flipout_lenet_heteroscedastic" if heteroscedastic else "flipout_lenet"
    return _compile(keras.Model(inputs, outputs, name=name), task, learning_rate, decay_steps)


def bayesian_transformer(input_shape, task="regression", num_classes=None, num_train=None,
                         seed=0, path="moments", mode="diagonal", width=16, num_heads=2,
                         ff_dim=32, pooling=None, learning_rate=3e-3, decay_steps=None):
    """A Bayesian transformer block over scalar tokens, trained sampling-free (seed 000).

    `zoo.models.transformer.TokenTransformerRegressor`: each of the J input
    values is a token; one `BayesianTransformerBlock`; by default
    path="moments", so training and prediction propagate means and
    (diagonal) covariances instead of sampling weights, with the Gaussian
    NLL under the propagated variance plus the closed-form KL / N.
    Regression only; inputs [J] (a table: mean pooling over tokens) or
    [J, 1] (a series window: the last token).
    """
    input_shape, num_train, seed = check_common(input_shape, task, num_classes, num_train,
                                                seed)
    if task != "regression":
        raise ValueError("bayesian_transformer is a regression model (it predicts a mean and "
                         f"a variance per example), got task {task!r}.")
    if len(input_shape) == 2 and input_shape[1] != 1 or len(input_shape) > 2:
        raise ValueError("bayesian_transformer reads [J] or [J, 1] inputs (J scalar tokens), "
                         f"got input_shape {input_shape}.")
    for key, value in (("width", width), ("num_heads", num_heads), ("ff_dim", ff_dim)):
        flags.check_sizes(key, value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (width, ff_dim)):
        # Token embedding, attention (query, key, value, output) and the
        # feed-forward pair; TokenTransformerRegressor names any other value.
        flags.check_parameter_count(
            "bayesian_transformer", 2 * input_shape[0] * width + 4 * _dense_weights(width, width)
            + _dense_weights(width, ff_dim) + _dense_weights(ff_dim, width),
            f"{input_shape[0]} tokens, width {width} and ff_dim {ff_dim}")
    if pooling is None:
        pooling = "last" if len(input_shape) == 2 else "mean"
    model = transformer_models.TokenTransformerRegressor(
        input_shape[0], path=path, mode=mode, width=width, num_heads=num_heads, ff_dim=ff_dim,
        pooling=pooling, seed=seed, name="bayesian_transformer")
    loss_mode = model.mode if path == "moments" else "diagonal"
    if loss_mode != "diagonal":
        raise ValueError("The zoo's bayesian_transformer outputs [mean, log variance]: "
                         f"use mode='diagonal', got {mode!r}.")
    model.build((None,) + input_shape)
    # kl_weight = 1/N from the start, as the functional models set it.
    for layer in kl_layers(model):
        layer.kl_weight.assign(1.0 / num_train)
    return _compile(model, task, learning_rate, decay_steps,
                    loss=MomentGaussianNLL(mode="diagonal"))

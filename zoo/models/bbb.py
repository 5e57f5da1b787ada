"""Bayes by Backprop MLP for regression (Blundell et al. 2015)."""

import math

import keras

from tfp_bnn import layers as bnn_layers
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.losses import GaussianNLL

# Blundell et al. (2015), sec. 3.3: a wide and a narrow zero-mean Gaussian.
# sigma1 = 1 is their wide component; sigma2 = exp(-6) concentrates the
# weights the data do not need near zero.
DEFAULT_PRIOR = priors.ScaleMixturePrior(pi=0.5, sigma1=1.0, sigma2=math.exp(-6.0))


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def bbb_mlp(
    input_dim,
    hidden_units=(50, 50),
    num_train=None,
    prior=DEFAULT_PRIOR,
    posterior=None,
    activation="relu",
    learning_rate=3e-3,
    decay_steps=None,
    seed=0,
):
    """A compiled Bayes-by-Backprop MLP with a heteroscedastic Gaussian output.

    Every layer is a `DenseReparameterization` with a mean-field Gaussian
    posterior and the scale-mixture prior, and its KL is the Monte Carlo
    estimate log q(w) - log p(w) at the sampled weights (Blundell et al.
    2015, eq. 2 and sec. 3.3; there is no closed form for the mixture). The
    last layer has 2 units, [mean, log variance], and the loss is
    `GaussianNLL`, so the network learns its noise level too. The objective
    per example is mean NLL + KL / num_train.

    Targets are expected standardised (zero mean, unit variance): the
    output layer starts near mean 0, log variance 0.

    Args:
        input_dim: number of input features, positive int.
        hidden_units: tuple of hidden layer widths (may be empty).
        num_train: N, the number of training examples; kl_weight = 1/N.
        prior: a `tfp_bnn.priors.Prior` for every weight.
        posterior: a `tfp_bnn.posteriors.Posterior`, or None for
            `MeanFieldNormal(rho_init=-5)`: sigma ~= 0.007 at the start, so
            the weight noise does not swamp the first gradient steps.
        activation: hidden-layer activation.
        learning_rate: Adam's initial learning rate.
        decay_steps: if given, the learning rate follows a cosine decay to
            10% of its initial value over this many steps (use the total
            number of training steps): the late, small steps average out
            the weight-noise gradient instead of jumping between modes.
        seed: int >= 0; seeds every layer's initial weights and weight noise.

    Returns:
        A compiled `keras.Model` mapping (batch, input_dim) to (batch, 2).

    Example:
    >>> model = bbb_mlp(8, num_train=927, decay_steps=600 * 29, seed=0)
    >>> model.fit(x, y, epochs=10, callbacks=[KLScheduler(num_examples=927)])
    """
    input_dim = _positive_int("input_dim", input_dim)
    hidden_units = tuple(hidden_units)
    for units in hidden_units:
        _positive_int("hidden_units", units)
    num_train = _positive_int("num_train", num_train)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative int, got {seed!r}.")
    learning_rate = float(learning_rate)
    if not math.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be a finite number > 0, got {learning_rate!r}.")
    if decay_steps is not None:
        decay_steps = _positive_int("decay_steps", decay_steps)
        learning_rate = keras.optimizers.schedules.CosineDecay(
            learning_rate, decay_steps, alpha=0.1
        )
    if posterior is None:
        posterior = posteriors.MeanFieldNormal(rho_init=-5.0)

    def dense(units, index, **kwargs):
        # A layer uses seed, seed + 1 and seed + 2 (kernel, rho, bias): a
        # stride of 10 keeps the layers of one model on distinct streams.
        return bnn_layers.DenseReparameterization(
            units,
            prior=prior,
            posterior=posterior,
            kl_weight=1.0 / num_train,
            kl_estimator="mc",
            seed=1000 * seed + 10 * index,
            name=f"dense_{index}",
            **kwargs,
        )

    inputs = keras.Input(shape=(input_dim,), name="features")
    hidden = inputs
    for index, units in enumerate(hidden_units):
        hidden = dense(units, index, activation=activation)(hidden)
    outputs = dense(2, len(hidden_units))(hidden)
    model = keras.Model(inputs, outputs, name="bbb_mlp")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=GaussianNLL(),
    )
    return model

"""Parity of `tfp_bnn.layers.DenseVariational` with `tfp.layers.DenseVariational`.

The reference is TFP's regression tutorial (Probabilistic_Layers_Regression):
`posterior_mean_field` (scale = 1e-5 + softplus(c + t)) and `prior_trainable`
(a per-weight loc, scale 1) on tf_keras. Ours is the same model written with
tfp_bnn objects:

    DenseVariational(units, posterior=MeanFieldNormal(rho_init=c, rho_init_stddev=0,
                     scale_offset=1e-5), prior=TrainableNormalPrior(), kernel_initializer="zeros")

Both layers get the same parameters (our rho = TFP's c + t), then:

- the exact KL (kl_use_exact=True) agrees to float tolerance, and so do the
  initial layers (both start at loc 0, scale 1 + 1e-5, prior loc 0);
- the Monte Carlo KL (kl_use_exact=False, TFP's default) is, in both, log
  q(w) - log p(w) at the w of the forward pass: w is read off the outputs
  of inputs [0; I] and the other implementation's densities evaluate it;
- outputs for a fixed input: per example and unit, mean x @ loc_K + loc_b
  and variance x^2 @ sigma_K^2 + sigma_b^2, and the covariance of two
  examples of one call (they share w), checked on Monte Carlo draws from
  both implementations (ours through calls and through tfp_bnn.predict).

Every Monte Carlo check is |z| <= K = 4.5 with a standard error from the
number of draws; there are 6 cells x 3 draw sets x 2 moments + 3 x 2
covariances = 42 checks, so by Bonferroni a correct implementation fails with
probability < 42 * 8e-6 = 3.4e-4 for a random seed; the seeds are fixed.
"""

import functools
import math

import pytest

# First: `tfp.layers` is built on tf_keras (see tests/integration/test_tfp_parity_dense.py).
tf_keras = pytest.importorskip("tf_keras")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

import tfp_bnn  # noqa: E402
from tests.integration import parity_checks  # noqa: E402
from tfp_bnn import posteriors  # noqa: E402
from tfp_bnn import priors  # noqa: E402
from tfp_bnn.layers import DenseVariational  # noqa: E402

tfd = tfp.distributions

pytestmark = [
    pytest.mark.filterwarnings("ignore:`layer.add_variable` is deprecated:UserWarning"),
]

INPUT_DIM, UNITS, ROWS = 3, 2, 3
SIZE = INPUT_DIM * UNITS + UNITS
C = math.log(math.expm1(1.0))
OFFSET = 1e-5
NUM_DRAWS = 4000
K = 4.5
PARAM_SEED = 20240602
TFP_SEED = 4321


# TFP's tutorial functions, verbatim but for `tf.keras` -> `tf_keras`.
def posterior_mean_field(kernel_size, bias_size=0, dtype=None):
    n = kernel_size + bias_size
    c = np.log(np.expm1(1.))
    return tf_keras.Sequential([
        tfp.layers.VariableLayer(2 * n, dtype=dtype),
        tfp.layers.DistributionLambda(lambda t: tfd.Independent(
            tfd.Normal(loc=t[..., :n], scale=1e-5 + tf.nn.softplus(c + t[..., n:])),
            reinterpreted_batch_ndims=1)),
    ])


def prior_trainable(kernel_size, bias_size=0, dtype=None):
    n = kernel_size + bias_size
    return tf_keras.Sequential([
        tfp.layers.VariableLayer(n, dtype=dtype),
        tfp.layers.DistributionLambda(lambda t: tfd.Independent(
            tfd.Normal(loc=t, scale=1), reinterpreted_batch_ndims=1)),
    ])


@functools.lru_cache(maxsize=None)
def _params():
    rng = np.random.default_rng(PARAM_SEED)
    sigma = rng.uniform(0.1, 0.6, SIZE)
    return {
        "loc": rng.normal(0.0, 0.5, SIZE),
        "sigma": sigma,
        "t": parity_checks.softplus_inverse(sigma - OFFSET) - C,  # TFP's untransformed scale
        "prior_loc": rng.normal(0.0, 0.3, SIZE),
        "x": rng.normal(0.0, 1.0, (ROWS, INPUT_DIM)),
    }


def _ours(kl_use_exact, p=None):
    layer = DenseVariational(
        UNITS, kernel_initializer="zeros", kl_use_exact=kl_use_exact, kl_weight=1.0, seed=7,
        posterior=posteriors.MeanFieldNormal(rho_init=C, rho_init_stddev=0.0,
                                             scale_offset=OFFSET),
        prior=priors.TrainableNormalPrior(),
    )
    layer.build((None, INPUT_DIM))
    if p is not None:
        loc, rho = layer.kernel_params
        loc.assign(p["loc"].astype("float32"))
        rho.assign((p["t"] + C).astype("float32"))
        layer._kernel_prior_built.variables[0].assign(p["prior_loc"].astype("float32"))
    return layer


def _theirs(kl_use_exact, p=None):
    layer = tfp.layers.DenseVariational(UNITS, posterior_mean_field, prior_trainable,
                                        kl_use_exact=kl_use_exact)
    layer.build((None, INPUT_DIM))
    if p is not None:
        (posterior,) = layer._posterior.layers[0].trainable_variables
        (prior,) = layer._prior.layers[0].trainable_variables
        posterior.assign(np.concatenate([p["loc"], p["t"]]).astype("float32"))
        prior.assign(p["prior_loc"].astype("float32"))
    return layer


def _exact_kl(p):
    sigma, m0 = p["sigma"], p["prior_loc"]
    return float(np.sum(-np.log(sigma) + (sigma**2 + (p["loc"] - m0) ** 2) / 2 - 0.5))


def _read_weights(outputs):
    """w = [flatten(kernel), bias] from the outputs of inputs [0; I]."""
    outputs = np.asarray(outputs, np.float64)
    bias = outputs[0]
    return np.concatenate([(outputs[1:] - bias).ravel(), bias])


def _probe():
    return np.concatenate([np.zeros((1, INPUT_DIM)), np.eye(INPUT_DIM)]).astype("float32")


# -- KL ------------------------------------------------------------------------------

def test_initial_layers_are_the_same_model():
    """Fresh layers: loc 0, scale 1 + 1e-5, prior N(0, 1): the same exact KL."""
    ours, theirs = _ours(True), _theirs(True)
    ours(_probe())
    theirs(_probe())
    expected = SIZE * (-math.log(1 + OFFSET) + (1 + OFFSET) ** 2 / 2 - 0.5)
    np.testing.assert_allclose(float(ours.losses[0]), expected, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(theirs.losses[0]), expected, rtol=1e-4, atol=1e-7)


def test_exact_kl_matches_tfp():
    p = _params()
    ours, theirs = _ours(True, p), _theirs(True, p)
    ours(p["x"].astype("float32"))
    theirs(p["x"].astype("float32"))
    np.testing.assert_allclose(float(theirs.losses[0]), _exact_kl(p), rtol=1e-5)
    np.testing.assert_allclose(float(ours.losses[0]), float(theirs.losses[0]), rtol=1e-5)
    np.testing.assert_allclose(float(ours.kl_divergence()), _exact_kl(p), rtol=1e-5)


def test_monte_carlo_kl_is_log_q_minus_log_p_at_a_posterior_sample():
    p = _params()
    ours, theirs = _ours(False, p), _theirs(False, p)
    x = _probe()
    w_ours = _read_weights(ours(x, training=True))
    w_theirs = _read_weights(theirs(x))
    assert not np.allclose(w_ours, p["loc"], atol=1e-2)  # both sampled
    assert not np.allclose(w_theirs, p["loc"], atol=1e-2)

    def tfp_kl(w):
        w = tf.constant(w, tf.float32)
        return float(theirs._posterior(x).log_prob(w) - theirs._prior(x).log_prob(w))

    def our_kl(w):
        w = tf.constant(w, tf.float32)
        return float(ours.kernel_posterior.log_prob(w) - ours.kernel_prior.log_prob(w))

    # Ours is taken at a fresh draw (tfp.layers' at the forward one): the draw
    # the next call makes from the same generator state.
    state = ours.seed_generator.state.numpy()
    kl_ours = float(ours.losses[0])
    ours.seed_generator.state.assign(state)
    w_fresh = _read_weights(ours(x, training=True))
    assert not np.allclose(w_fresh, w_ours, atol=1e-2)
    # w is read back through a matmul, so compare at float32 output resolution.
    np.testing.assert_allclose(kl_ours, tfp_kl(w_fresh), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(float(theirs.losses[0]), our_kl(w_theirs), rtol=1e-4, atol=1e-3)


# -- output moments -------------------------------------------------------------------

@pytest.fixture(scope="module")
def draws():
    p = _params()
    ours = _ours(False, p)
    model = keras.Sequential([keras.Input((INPUT_DIM,)), ours])
    tf.random.set_seed(TFP_SEED)
    return {
        "ours_calls": parity_checks.draw_calls(ours, p["x"], NUM_DRAWS),
        "ours_predict": tfp_bnn.predict.sample(model, p["x"].astype("float32"),
                                               num_samples=NUM_DRAWS).astype(np.float64),
        "theirs": parity_checks.draw_calls(_theirs(False, p), p["x"], NUM_DRAWS),
    }


def _analytic(p):
    kernel_loc = p["loc"][:-UNITS].reshape(INPUT_DIM, UNITS)
    kernel_var = np.square(p["sigma"][:-UNITS]).reshape(INPUT_DIM, UNITS)
    bias_loc, bias_var = p["loc"][-UNITS:], np.square(p["sigma"][-UNITS:])
    x = p["x"]
    mean = x @ kernel_loc + bias_loc
    var = np.square(x) @ kernel_var + bias_var
    cross = (x[0] * x[1]) @ kernel_var + bias_var  # rows 0 and 1 share w
    return mean, var, cross


@pytest.mark.parametrize("which", ["ours_calls", "ours_predict", "theirs"])
def test_output_moments_match_the_analytic_values(draws, which):
    y = draws[which]
    assert y.shape == (NUM_DRAWS, ROWS, UNITS)
    mean, var, cross = _analytic(_params())
    t = NUM_DRAWS
    z_mean = np.abs(y.mean(0) - mean) / np.sqrt(var / t)
    assert np.all(z_mean <= K), z_mean
    centred = y - y.mean(0)
    z_var = np.abs(centred.var(0, ddof=1) - var) / (var * math.sqrt(2.0 / (t - 1)))
    assert np.all(z_var <= K), z_var
    products = centred[:, 0] * centred[:, 1]
    se = products.std(0, ddof=1) / math.sqrt(t)
    assert np.all(np.abs(products.mean(0) - cross) <= K * se), (products.mean(0), cross, se)
    # Power: a batch with one w per row (no shared sample) would have zero
    # covariance, more than 2 K standard errors away.
    assert np.all(np.abs(cross) > 2 * K * se), (cross, se)

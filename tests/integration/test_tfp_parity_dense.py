"""Parity of tfp_bnn's Dense layers with `tfp.layers`, the tf_keras reference.

Each of our Keras 3 layers is set to the same posterior (loc, sigma), bias and
prior as its `tfp.layers` counterpart, then compared on

- the KL term: ours (unweighted) against TFP's `losses[0]` and the closed form;
- the output distribution for a fixed input: per example and unit, mean
  x @ loc + b and variance x^2 @ sigma^2 for all three estimators, checked on
  Monte Carlo draws from both implementations;
- the covariance of two examples of one batch: x_0 x_1 @ sigma^2 when the
  batch shares one kernel (reparameterization), zero when each example gets
  its own noise (Flipout, local reparameterization).
"""

import functools
import math

import pytest

# First: TFP 0.25 imports tf_keras on first use with TensorFlow, and
# `tfp.layers` is built on it.
tf_keras = pytest.importorskip("tf_keras")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from tests.integration import parity_checks  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn import priors  # noqa: E402

tfd = tfp.distributions

pytestmark = [
    # TFP's own layer code, not ours.
    pytest.mark.filterwarnings("ignore:`layer.add_variable` is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:The initializer RandomNormal is unseeded:UserWarning"),
]

INPUT_DIM, UNITS, ROWS = 6, 4, 3
PRIOR_LOC, PRIOR_SCALE = 0.3, 0.7
# N(PRIOR_LOC, PRIOR_SCALE^2) on every weight, as TFP's kernel_prior_fn.
SHIFTED_PRIOR_FN = parity_checks.normal_prior_fn(PRIOR_LOC, PRIOR_SCALE)

# Monte Carlo design. Per estimator there are ROWS * UNITS = 12 cells, and
# per cell 5 checks (mean and variance of each implementation, their mean
# difference), plus 2 * UNITS = 8 covariance checks: 68 per estimator, 204 in
# all. Every check is a |z| <= K test of a statistic that is (close to)
# Gaussian with a known standard error (estimated, for covariances).
# P(|z| > 4.5) = 6.8e-6 for a Gaussian; for the sample variance
# (var * chi2_{T-1} / (T-1)) the exact two-sided tail at T = 4000 is 8.0e-6.
# By Bonferroni, which needs no independence between checks, a correct
# implementation fails with probability <= 204 * 8e-6 = 1.6e-3 for a random
# seed; the seeds below are fixed, so the suite is deterministic. Power: 20%
# off in sigma moves a variance by 44% = 20 standard errors
# (sqrt(2 / (T - 1)) = 2.2%).
NUM_DRAWS = 4000
K = 4.5
_within = functools.partial(parity_checks.assert_within, k=K)

OUR_SEED = 1234
TFP_SEED = 4321
PARAM_SEED = 20240601

KINDS = {
    "reparameterization": (layers.DenseReparameterization, "DenseReparameterization"),
    "flipout": (layers.DenseFlipout, "DenseFlipout"),
    "local_reparameterization": (
        layers.DenseLocalReparameterization,
        "DenseLocalReparameterization",
    ),
}


@functools.lru_cache(maxsize=None)
def _params():
    """Fixed, non-trivial posterior, bias and inputs (float64)."""
    rng = np.random.default_rng(PARAM_SEED)
    return {
        "loc": rng.normal(0.0, 0.5, (INPUT_DIM, UNITS)),
        "sigma": rng.uniform(0.05, 0.5, (INPUT_DIM, UNITS)),
        "bias": rng.normal(0.0, 0.5, (UNITS,)),
        "x": rng.normal(0.0, 1.0, (ROWS, INPUT_DIM)),
    }


def _analytic_moments(p):
    """Per example and unit: mean x @ loc + b, variance x^2 @ sigma^2."""
    mean = p["x"] @ p["loc"] + p["bias"]
    var = np.square(p["x"]) @ np.square(p["sigma"])
    return mean, var


def _analytic_cross_covariance(p, kind):
    """Cov(y_0u, y_1u) of the first two examples of one call."""
    if kind == "reparameterization":
        return (p["x"][0] * p["x"][1]) @ np.square(p["sigma"])
    return np.zeros(UNITS)


def _build_ours(kind, p, prior=None):
    layer = KINDS[kind][0](UNITS, prior=prior, kl_weight=1.0, seed=OUR_SEED)
    layer.build((None, INPUT_DIM))
    loc_var, rho_var = layer.kernel_params
    loc_var.assign(p["loc"].astype(np.float32))
    rho_var.assign(parity_checks.softplus_inverse(p["sigma"]).astype(np.float32))
    layer.bias.assign(p["bias"].astype(np.float32))
    return layer


def _build_theirs(kind, p, kernel_prior_fn=None):
    cls = getattr(tfp.layers, KINDS[kind][1])
    kwargs = {} if kernel_prior_fn is None else {"kernel_prior_fn": kernel_prior_fn}
    layer = cls(UNITS, **kwargs)
    layer.build((None, INPUT_DIM))
    variables = {v.name.split("/")[-1].split(":")[0]: v for v in layer.variables}
    # TFP's scale is eps + softplus(untransformed_scale), eps of float32
    # (tfp.layers.util.default_loc_scale_fn); undo both to land on sigma.
    eps = np.finfo(np.float32).eps
    variables["kernel_posterior_loc"].assign(p["loc"].astype(np.float32))
    variables["kernel_posterior_untransformed_scale"].assign(
        parity_checks.softplus_inverse(p["sigma"] - eps).astype(np.float32)
    )
    variables["bias_posterior_loc"].assign(p["bias"].astype(np.float32))
    return layer


@functools.lru_cache(maxsize=None)
def _samples(kind):
    p = _params()
    ours = parity_checks.draw_calls(_build_ours(kind, p), p["x"], NUM_DRAWS)
    tf.random.set_seed(TFP_SEED)
    theirs = parity_checks.draw_calls(_build_theirs(kind, p), p["x"], NUM_DRAWS)
    return ours, theirs


# -- setup ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_posterior_scale_and_bias(kind):
    # Guards the comparison below: both layers must hold the same q(w).
    p = _params()
    ours, theirs = _build_ours(kind, p), _build_theirs(kind, p)
    ours_scale = ours.kernel_posterior.distribution.scale.numpy()
    theirs_scale = tf.convert_to_tensor(theirs.kernel_posterior.distribution.scale).numpy()
    np.testing.assert_allclose(ours_scale, p["sigma"], rtol=1e-6)
    np.testing.assert_allclose(theirs_scale, p["sigma"], rtol=1e-6)
    np.testing.assert_allclose(
        ours.kernel_posterior.distribution.loc.numpy(),
        theirs.kernel_posterior.distribution.loc.numpy(),
        rtol=0,
        atol=0,
    )
    np.testing.assert_array_equal(
        ours.bias.numpy(), theirs.bias_posterior.distribution.loc.numpy()
    )


# -- KL -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("prior_name", ["default", "shifted"])
def test_kl_matches_tfp(kind, prior_name):
    p = _params()
    if prior_name == "default":
        ours = _build_ours(kind, p)
        theirs = _build_theirs(kind, p)
        expected = parity_checks.normal_kl(p["loc"], p["sigma"], 0.0, 1.0)
    else:
        ours = _build_ours(kind, p, prior=priors.NormalPrior(loc=PRIOR_LOC, scale=PRIOR_SCALE))
        theirs = _build_theirs(kind, p, kernel_prior_fn=SHIFTED_PRIOR_FN)
        expected = parity_checks.normal_kl(p["loc"], p["sigma"], PRIOR_LOC, PRIOR_SCALE)
    x = tf.constant(p["x"], tf.float32)
    ours(x)
    theirs(x)
    assert len(theirs.losses) == 1  # kernel KL only: TFP's bias is deterministic
    assert len(ours.losses) == 1
    tfp_kl = float(theirs.losses[0])
    np.testing.assert_allclose(float(ours.losses[0]), tfp_kl, rtol=1e-5)
    np.testing.assert_allclose(float(ours.kl_divergence()), tfp_kl, rtol=1e-5)
    # A third, independent reference, so that a shared mistake cannot pass.
    np.testing.assert_allclose(tfp_kl, expected, rtol=1e-5)


# -- output distribution ----------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_output_moments_match_analytic_and_tfp(kind):
    ours, theirs = _samples(kind)
    mean, var = _analytic_moments(_params())
    t = NUM_DRAWS
    for name, draws in (("ours", ours), ("tfp", theirs)):
        _within(f"{kind} {name} mean", draws.mean(0), mean, np.sqrt(var / t))
        _within(
            f"{kind} {name} variance",
            draws.var(0, ddof=1),
            var,
            var * math.sqrt(2.0 / (t - 1)),
        )
    _within(
        f"{kind} ours - tfp mean", ours.mean(0) - theirs.mean(0), 0.0, np.sqrt(2.0 * var / t)
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cross_example_covariance_matches_tfp(kind):
    # Within one call, reparameterization shares a kernel across the batch;
    # Flipout and local reparameterization decorrelate the examples. Both
    # implementations must agree on which.
    p = _params()
    target = _analytic_cross_covariance(p, kind)
    # Power of the zero-covariance checks: a shared kernel would give this.
    shared = _analytic_cross_covariance(p, "reparameterization")
    _, var = _analytic_moments(p)
    assert np.max(np.abs(shared) / np.sqrt(var[0] * var[1] / NUM_DRAWS)) > 4 * K
    ours, theirs = _samples(kind)
    for name, draws in (("ours", ours), ("tfp", theirs)):
        a = draws[:, 0] - draws[:, 0].mean(0)
        b = draws[:, 1] - draws[:, 1].mean(0)
        products = a * b
        # Distribution-free standard error (CLT): Flipout's outputs are not
        # jointly Gaussian, so the Gaussian formula would not apply.
        standard_error = products.std(0, ddof=1) / math.sqrt(NUM_DRAWS)
        _within(f"{kind} {name} covariance", products.mean(0), target, standard_error)


# -- why this library exists --------------------------------------------------------


def test_tfp_layers_cannot_join_a_keras3_model():
    layer = tfp.layers.DenseFlipout(UNITS)
    assert not isinstance(layer, keras.layers.Layer)
    with pytest.raises(ValueError, match="Only instances of `keras.Layer`"):
        keras.Sequential([keras.Input((INPUT_DIM,)), layer])

"""Parity of tfp_bnn's 1-D and 3-D convolutions with `tfp.layers`, the tf_keras reference.

Each of our Keras 3 layers is set to the same posterior (loc, sigma), bias and
prior as its `tfp.layers.Convolution{1,3}D{Flipout,Reparameterization}`
counterpart, then compared on

- the KL term: ours (unweighted) against TFP's `losses[0]` and the closed form;
- the output mean: ours in mean mode against TFP with its kernel posterior
  tensor set to the posterior mean, and both against a NumPy convolution;
- the output distribution for a fixed input, per example, position and
  filter: mean conv(x, loc) + b and variance conv(x^2, sigma^2), checked on
  Monte Carlo draws from both implementations;
- the covariance of two examples of one call: conv(x_0 * x_1, sigma^2) when
  the batch shares one kernel (reparameterization), zero with Flipout's
  per-example signs.
"""

import functools
import math

import pytest

# First: TFP 0.25 imports tf_keras on first use with TensorFlow, and
# `tfp.layers` is built on it.
tf_keras = pytest.importorskip("tf_keras")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402
from numpy.lib.stride_tricks import sliding_window_view  # noqa: E402

from tests.integration import parity_checks  # noqa: E402
import tfp_bnn  # noqa: E402
from tfp_bnn import layers  # noqa: E402
from tfp_bnn import priors  # noqa: E402

tfd = tfp.distributions

pytestmark = [
    # TFP's own layer code, not ours.
    pytest.mark.filterwarnings("ignore:`layer.add_variable` is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:The initializer RandomNormal is unseeded:UserWarning"),
]

FILTERS, CHANNELS, BATCH = 2, 2, 2
# Valid padding: outputs (2, 3, 2) and (2, 2, 2, 1, 2), 12 and 16 cells.
CASES = {
    "1d": {"spatial": (5,), "kernel_size": (3,)},
    "3d": {"spatial": (3, 3, 2), "kernel_size": (2, 2, 2)},
}
KINDS = ("flipout", "reparameterization")
PRIOR_LOC, PRIOR_SCALE = 0.3, 0.7
# N(PRIOR_LOC, PRIOR_SCALE^2) on every weight, as TFP's kernel_prior_fn.
SHIFTED_PRIOR_FN = parity_checks.normal_prior_fn(PRIOR_LOC, PRIOR_SCALE)

# Monte Carlo design, as in test_tfp_parity_dense.py. Per case and kind there are
# at most 16 cells and per cell 6 checks (mean and variance of each
# implementation, their mean difference, the cross-example covariance of
# each): at most 96 * 4 = 384 checks, each a |z| <= K test of a statistic
# that is (close to) Gaussian with a known or estimated standard error.
# P(|z| > 4.5) = 6.8e-6 for a Gaussian; the sample variance's exact two-sided
# tail at T = 2000 is about 1e-5. By Bonferroni a correct implementation
# fails with probability <= 384 * 1e-5 = 4e-3 for a random seed; the seeds
# below are fixed, so the suite is deterministic. Power: 20% off in sigma
# moves a variance by 44% = 14 standard errors (sqrt(2 / (T - 1)) = 3.2%).
NUM_DRAWS = 2000
K = 4.5
_within = functools.partial(parity_checks.assert_within, k=K)

OUR_SEED = 1234
TFP_SEED = 4321
PARAM_SEED = 20261124


@functools.lru_cache(maxsize=None)
def _params(case):
    """Fixed, non-trivial posterior, bias and inputs (float64), channels_last."""
    rng = np.random.default_rng(PARAM_SEED + len(CASES[case]["spatial"]))
    kernel_shape = CASES[case]["kernel_size"] + (CHANNELS, FILTERS)
    return {
        "loc": rng.normal(0.0, 0.5, kernel_shape),
        "sigma": rng.uniform(0.05, 0.5, kernel_shape),
        "bias": rng.normal(0.0, 0.5, (FILTERS,)),
        "x": rng.normal(0.0, 1.0, (BATCH,) + CASES[case]["spatial"] + (CHANNELS,)),
    }


def _conv(x, kernel):
    """Valid, stride-1 convolution in float64: x (B, *S, C), kernel (*K, C, F)."""
    rank = kernel.ndim - 2
    spatial_axes = tuple(range(1, rank + 1))
    windows = sliding_window_view(x, kernel.shape[:rank], axis=spatial_axes)
    windows = np.moveaxis(windows, rank + 1, -1)  # (B, *O, *K, C)
    window_axes = list(range(rank + 1, 2 * rank + 2))
    return np.tensordot(windows, kernel, axes=(window_axes, list(range(rank + 1))))


def _analytic_moments(p):
    """Per example, position and filter: mean conv(x, loc) + b, var conv(x^2, sigma^2)."""
    return _conv(p["x"], p["loc"]) + p["bias"], _conv(np.square(p["x"]), np.square(p["sigma"]))


def _analytic_cross_covariance(p, kind):
    """Cov(y_0, y_1) per position and filter for the first two examples of one call."""
    if kind == "reparameterization":
        return _conv(p["x"][:1] * p["x"][1:2], np.square(p["sigma"]))[0]
    return np.zeros(_conv(p["x"][:1], p["loc"]).shape[1:])


def _ours_class(case, kind):
    rank = len(CASES[case]["spatial"])
    return getattr(layers, f"Conv{rank}D{kind.capitalize()}")


def _theirs_class(case, kind):
    rank = len(CASES[case]["spatial"])
    return getattr(tfp.layers, f"Convolution{rank}D{kind.capitalize()}")


def _build_ours(case, kind, prior=None):
    p = _params(case)
    layer = _ours_class(case, kind)(FILTERS, CASES[case]["kernel_size"], prior=prior,
                                    kl_weight=1.0, seed=OUR_SEED)
    layer.build(p["x"].shape)
    loc_var, rho_var = layer.kernel_params
    loc_var.assign(p["loc"].astype(np.float32))
    rho_var.assign(parity_checks.softplus_inverse(p["sigma"]).astype(np.float32))
    layer.bias.assign(p["bias"].astype(np.float32))
    return layer


def _posterior_mean(distribution):
    return distribution.mean()


def _build_theirs(case, kind, **kwargs):
    p = _params(case)
    layer = _theirs_class(case, kind)(FILTERS, CASES[case]["kernel_size"], **kwargs)
    layer.build(p["x"].shape)
    variables = {v.name.split("/")[-1].split(":")[0]: v for v in layer.variables}
    # TFP's scale is eps + softplus(untransformed_scale), eps of float32
    # (tfp.layers.util.default_loc_scale_fn); undo both to land on sigma.
    eps = np.finfo(np.float32).eps
    variables["kernel_posterior_loc"].assign(p["loc"].astype(np.float32))
    variables["kernel_posterior_untransformed_scale"].assign(
        parity_checks.softplus_inverse(p["sigma"] - eps).astype(np.float32))
    variables["bias_posterior_loc"].assign(p["bias"].astype(np.float32))
    return layer


@functools.lru_cache(maxsize=None)
def _samples(case, kind):
    x = _params(case)["x"]
    ours = parity_checks.draw_calls(_build_ours(case, kind), x, NUM_DRAWS)
    tf.random.set_seed(TFP_SEED)
    theirs = parity_checks.draw_calls(_build_theirs(case, kind), x, NUM_DRAWS)
    return ours, theirs


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_kl_matches_tfp(case, kind):
    p = _params(case)
    x = tf.constant(p["x"], tf.float32)
    for prior, prior_fn, expected in (
        (None, None, parity_checks.normal_kl(p["loc"], p["sigma"], 0.0, 1.0)),
        (priors.NormalPrior(loc=PRIOR_LOC, scale=PRIOR_SCALE), SHIFTED_PRIOR_FN,
         parity_checks.normal_kl(p["loc"], p["sigma"], PRIOR_LOC, PRIOR_SCALE)),
    ):
        ours = _build_ours(case, kind, prior=prior)
        theirs = _build_theirs(case, kind,
                               **({} if prior_fn is None else {"kernel_prior_fn": prior_fn}))
        ours(x)
        theirs(x)
        assert len(theirs.losses) == 1  # kernel KL only: TFP's bias is deterministic
        assert len(ours.losses) == 1
        tfp_kl = float(theirs.losses[0])
        np.testing.assert_allclose(float(ours.losses[0]), tfp_kl, rtol=1e-5)
        np.testing.assert_allclose(float(ours.kl_divergence()), tfp_kl, rtol=1e-5)
        # A third, independent reference, so that a shared mistake cannot pass.
        np.testing.assert_allclose(tfp_kl, expected, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mean_output_matches_tfp(case, kind):
    p = _params(case)
    x = tf.constant(p["x"], tf.float32)
    ours = _build_ours(case, kind)
    tfp_bnn.set_mean_mode(ours, True)
    theirs = _build_theirs(case, kind, kernel_posterior_tensor_fn=_posterior_mean)
    mean, _ = _analytic_moments(p)
    ours_mean = ours(x).numpy()
    theirs_mean = theirs(x).numpy()
    assert ours_mean.shape == theirs_mean.shape == mean.shape
    np.testing.assert_allclose(ours_mean, theirs_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours_mean, mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_moments_match_analytic_and_tfp(case, kind):
    ours, theirs = _samples(case, kind)
    mean, var = _analytic_moments(_params(case))
    t = NUM_DRAWS
    for name, draws in (("ours", ours), ("tfp", theirs)):
        _within(f"{case} {kind} {name} mean", draws.mean(0), mean, np.sqrt(var / t))
        _within(f"{case} {kind} {name} variance", draws.var(0, ddof=1), var,
                       var * math.sqrt(2.0 / (t - 1)))
    _within(f"{case} {kind} ours - tfp mean", ours.mean(0) - theirs.mean(0), 0.0,
                   np.sqrt(2.0 * var / t))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_example_covariance_matches_tfp(case, kind):
    # Reparameterization shares a kernel across the batch; Flipout's
    # per-example signs decorrelate the examples. Both must agree on which.
    p = _params(case)
    target = _analytic_cross_covariance(p, kind)
    # Power of the zero-covariance checks: a shared kernel would give this,
    # at least 2 * K (rough, Gaussian) standard errors away from zero.
    shared = _analytic_cross_covariance(p, "reparameterization")
    _, var = _analytic_moments(p)
    assert np.max(np.abs(shared) / np.sqrt(var[0] * var[1] / NUM_DRAWS)) > 2 * K
    ours, theirs = _samples(case, kind)
    for name, draws in (("ours", ours), ("tfp", theirs)):
        a = draws[:, 0] - draws[:, 0].mean(0)
        b = draws[:, 1] - draws[:, 1].mean(0)
        products = a * b
        # Distribution-free standard error (CLT): Flipout's outputs are not
        # jointly Gaussian.
        standard_error = products.std(0, ddof=1) / math.sqrt(NUM_DRAWS)
        _within(f"{case} {kind} {name} covariance", products.mean(0), target,
                       standard_error)

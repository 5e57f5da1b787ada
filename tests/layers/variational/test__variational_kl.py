"""The KL term of a variational layer: closed form, Monte Carlo estimate, weighting, penalty."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import priors
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization

LAYERS = [DenseReparameterization, DenseFlipout, DenseLocalReparameterization]


def _kl_draws(layer, x, n):
    """n independent training-mode KL estimates, from one compiled function."""

    @tf.function
    def draw():
        layer(x, training=True)
        return layer.losses[0]

    return np.asarray([float(draw()) for _ in range(n)])


def _set_posterior(layer, seed):
    rng = np.random.default_rng(seed)
    loc, rho = layer.kernel_params
    loc.assign(rng.normal(0, 0.5, loc.shape).astype("float32"))
    rho.assign(rng.normal(-1.5, 0.5, rho.shape).astype("float32"))
    mu = loc.numpy().astype("float64")
    sigma = np.log1p(np.exp(rho.numpy().astype("float64")))
    return mu, sigma


def _diag_gaussian_kl(mu_q, sigma_q, mu_p, sigma_p):
    # seed 003, eq. (1)
    return 0.5 * np.sum(
        np.log(sigma_p**2 / sigma_q**2) - 1 + sigma_q**2 / sigma_p**2
        + (mu_p - mu_q) ** 2 / sigma_p**2
    )


@pytest.mark.jax
@pytest.mark.parametrize("cls", LAYERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("prior", [(0.0, 1.0), (0.3, 0.7)])
def test_analytic_kl_matches_closed_form(cls, prior):
    layer = cls(5, kl_weight=1.0, prior=priors.NormalPrior(*prior))
    layer.build((None, 4))
    mu, sigma = _set_posterior(layer, 0)
    expected = _diag_gaussian_kl(mu, sigma, *prior)
    layer(np.ones((2, 4), "float32"))
    assert float(layer.losses[0]) == pytest.approx(expected, rel=1e-5)
    assert float(layer.kl_divergence()) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("cls", LAYERS, ids=lambda c: c.__name__)
def test_mc_kl_is_unbiased_for_the_analytic_value(cls):
    layer = cls(5, kl_weight=1.0, kl_estimator="mc", seed=3)
    layer.build((None, 4))
    mu, sigma = _set_posterior(layer, 1)
    expected = _diag_gaussian_kl(mu, sigma, 0.0, 1.0)
    x = np.ones((2, 4), "float32")
    draws = _kl_draws(layer, x, 2000)
    # Mean of 2000 independent estimates: within 5 standard errors.
    assert abs(draws.mean() - expected) < 5 * draws.std(ddof=1) / np.sqrt(draws.size)
    assert draws.std() > 0  # it really is a Monte Carlo estimate


def test_mc_kl_to_scale_mixture_matches_numerical_integration():
    prior = priors.ScaleMixturePrior(pi=0.5, sigma1=1.0, sigma2=0.05)
    layer = DenseReparameterization(3, kl_weight=1.0, prior=prior, seed=5)
    layer.build((None, 2))
    mu, sigma = _set_posterior(layer, 2)
    # KL = sum_i E_q[log q - log p], each a 1-D integral on a fine grid.
    expected = 0.0
    for m, s in zip(mu.ravel(), sigma.ravel()):
        w = np.linspace(m - 10 * s, m + 10 * s, 20001)
        q = np.exp(-0.5 * ((w - m) / s) ** 2) / (s * np.sqrt(2 * np.pi))
        p = sum(
            pi * np.exp(-0.5 * (w / sd) ** 2) / (sd * np.sqrt(2 * np.pi))
            for pi, sd in ((0.5, 1.0), (0.5, 0.05))
        )
        expected += np.trapezoid(q * (np.log(q + 1e-300) - np.log(p)), w)
    draws = _kl_draws(layer, np.ones((1, 2), "float32"), 3000)
    assert abs(draws.mean() - expected) < 5 * draws.std(ddof=1) / np.sqrt(draws.size)


@pytest.mark.jax
def test_mc_kl_in_the_loss_is_taken_at_a_fresh_posterior_draw():
    """Each read of the losses estimates log q(w') - log p(w') at a new w' ~ q,
    not at the weights of the forward pass (equally unbiased: see above)."""
    layer = DenseReparameterization(1, kl_weight=1.0, kl_estimator="mc", use_bias=False, seed=0)
    layer.build((None, 1))
    loc, rho = layer.kernel_params
    loc.assign([[0.2]])
    rho.assign([[0.0]])
    sigma = np.log1p(np.exp(0.0))
    w = float(layer(np.ones((1, 1), "float32"), training=True)[0, 0])  # output = w
    at_forward = (-np.log(sigma) - 0.5 * ((w - 0.2) / sigma) ** 2) - (-0.5 * w**2)
    first, second = float(layer.losses[0]), float(layer.losses[0])
    assert first != second
    assert at_forward not in (pytest.approx(first), pytest.approx(second))
    # log q - log p is concave in w' here (sigma < 1): no estimate exceeds its maximum.
    top = -np.log(sigma) + 0.5 * 0.2**2 / (1 - sigma**2)
    assert max(first, second) <= top + 1e-5


@pytest.mark.jax
def test_kl_weight_scales_the_loss_and_the_tracker():
    layer = DenseReparameterization(4, kl_weight=0.25, seed=0)
    x = np.ones((3, 2), "float32")
    layer(x)
    raw = float(layer.kl_divergence())
    assert float(layer.losses[0]) == pytest.approx(0.25 * raw, rel=1e-6)
    assert float(layer.kl_tracker.result()) == pytest.approx(0.25 * raw, rel=1e-6)
    layer.kl_weight.assign(0.0)
    layer(x)
    assert float(layer.losses[0]) == 0.0


def test_kl_gradient_matches_closed_form_derivative():
    layer = DenseReparameterization(2, kl_weight=1.0)
    layer.build((None, 2))
    mu, sigma = _set_posterior(layer, 3)
    loc, rho = layer.kernel_params
    with tf.GradientTape() as tape:
        layer(np.ones((1, 2), "float32"))
        kl = layer.losses[0]
    g_loc, g_rho = tape.gradient(kl, [loc, rho])
    # d/dmu = mu ; d/drho = (sigma - 1/sigma) * sigmoid(rho)
    np.testing.assert_allclose(g_loc, mu, rtol=1e-5)
    sig = 1 / (1 + np.exp(-rho.numpy().astype("float64")))
    np.testing.assert_allclose(g_rho, (sigma - 1 / sigma) * sig, rtol=1e-4)


@pytest.mark.jax
def test_kl_penalty_is_the_weighted_kl_and_is_logged_like_a_call():
    layer = DenseReparameterization(3, kl_weight=0.25, seed=0)
    layer(np.ones((2, 4), "float32"))
    layer.kl_tracker.reset_state()
    penalty = float(layer.kl_penalty(8))
    assert penalty == pytest.approx(0.25 * float(layer.kl_divergence()), rel=1e-6)
    assert float(layer.kl_tracker.result()) == pytest.approx(penalty, rel=1e-6)
    # The caller adds the penalty: the layer's own regularizer adds nothing more.
    assert [float(term) for term in layer.losses] == [0.0]

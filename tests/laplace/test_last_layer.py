"""Last-layer Laplace against Bayesian linear regression (where it is exact), and its
predictives: closed form, probit, and Monte Carlo through tfp_bnn.predict."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn import _memory
from tfp_bnn.laplace import LastLayerLaplace
from tfp_bnn.laplace.last_layer import _centred

N, D, K = 30, 3, 2
NOISE = 0.25


@pytest.fixture(scope="module")
def linear():
    """A one-Dense model (features = inputs) and its data; phi = [x, 1] in float64."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, D)).astype("float32")
    y = (x @ rng.normal(size=(D, K)) + 0.5 * rng.normal(size=(N, K))).astype("float32")
    model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(K)])
    phi = np.concatenate([x, np.ones((N, 1))], axis=1).astype(np.float64)
    return model, x, y.astype(np.float64), phi


def blr_posterior(phi, y, lam):
    """Exact posterior of Bayesian linear regression, per output: (mean [P, K], cov [P, P])."""
    cov = np.linalg.inv(phi.T @ phi / NOISE + lam * np.eye(phi.shape[1]))
    return cov @ phi.T @ y / NOISE, cov


def blr_log_evidence(phi, y, lam):
    """log N(y_k | 0, sigma^2 I + phi phi^T / lambda) summed over the K outputs."""
    cov = NOISE * np.eye(len(phi)) + phi @ phi.T / lam
    _, logdet = np.linalg.slogdet(cov)
    quad = np.sum(y * np.linalg.solve(cov, y))
    return -0.5 * (y.shape[1] * (len(phi) * np.log(2 * np.pi) + logdet) + quad)


def fitted(model, x, y, phi, lam, hessian="full"):
    """Sets the model's weights to the exact MAP under lambda and fits the Laplace."""
    mean, _ = blr_posterior(phi, y, lam)
    model.layers[-1].set_weights([mean[:-1], mean[-1]])
    laplace = LastLayerLaplace(model, "regression", hessian=hessian, prior_precision=lam,
                               noise_variance=NOISE)
    return laplace.fit(x, y, batch_size=16)


@pytest.mark.jax
@pytest.mark.parametrize("hessian", ["full", "kron"])
def test_linear_regression_posterior_and_predictive_are_exact(linear, hessian):
    model, x, y, phi = linear
    laplace = fitted(model, x, y, phi, 2.0, hessian)
    _, cov = blr_posterior(phi, y, 2.0)
    blocks = laplace.posterior_covariance.reshape(D + 1, K, D + 1, K)
    for k in range(K):
        for l in range(K):
            np.testing.assert_allclose(blocks[:, k, :, l], cov if k == l else 0 * cov,
                                       rtol=1e-9, atol=1e-12)
    far = x[:5] * 3
    pred = laplace.predict(far)
    test_phi = np.concatenate([far, np.ones((5, 1), "float32")], axis=1).astype(np.float64)
    expected = np.einsum("np,pq,nq->n", test_phi, cov, test_phi)
    np.testing.assert_allclose(pred["epistemic_variance"], np.stack([expected] * K, 1),
                               rtol=1e-9)
    np.testing.assert_allclose(pred["stddev"] ** 2, pred["epistemic_variance"] + NOISE,
                               rtol=1e-12)
    np.testing.assert_allclose(pred["mean"], model.predict(far, verbose=0), rtol=1e-5)
    # Without a noise variance, fit estimates it by maximum likelihood from the residuals.
    residuals = y - model.predict(x, verbose=0)
    estimated = LastLayerLaplace(model, "regression", hessian=hessian).fit(x, y)
    assert estimated.noise_variance == pytest.approx(np.mean(residuals ** 2), rel=1e-5)


def test_laplace_evidence_is_the_exact_evidence_and_its_maximiser_the_grid_one(linear):
    model, x, y, phi = linear
    for lam in (0.1, 3.0):  # at the MAP under lambda the Laplace evidence is exact
        laplace = fitted(model, x, y, phi, lam)
        assert laplace.log_marginal_likelihood() == pytest.approx(
            blr_log_evidence(phi, y, lam), rel=1e-9)
    # Brute force: a grid with step 2e-3 in log lambda, then a finer one (step 2e-6)
    # around its best point: the exact maximiser is within 1e-6 of the fine argmax.
    coarse = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 6909))
    best = coarse[np.argmax([blr_log_evidence(phi, y, lam) for lam in coarse])]
    fine = best * np.exp(np.linspace(-2e-3, 2e-3, 2001))
    best = fine[np.argmax([blr_log_evidence(phi, y, lam) for lam in fine])]
    laplace = fitted(model, x, y, phi, best)
    # At theta* = MAP(best) the evidence's slope in lambda is the exact evidence's (envelope
    # theorem), so the Laplace maximiser is the grid's within the fine step and the float32
    # rounding of theta* (relative 1e-7): 1e-5 is a 10x margin.
    assert laplace.optimize_prior_precision() == pytest.approx(best, rel=1e-5)


@pytest.mark.jax
def test_monte_carlo_regression_through_predict_matches_the_closed_form(linear):
    model, x, y, phi = linear
    laplace = fitted(model, x, y, phi, 1.0)
    closed = laplace.predict(x[:6])
    num_samples = 4000
    mc = tfp_bnn.predict.regression(laplace.predictive_model(seed=3), x[:6], num_samples)
    # The sampled means are exactly Gaussian (linear in the weights): the mean's error has
    # sd sqrt(v / T), the sample variance's relative sd is sqrt(2 / (T - 1)) = 0.022; five
    # sd for each of the 12 outputs.
    var = closed["epistemic_variance"]
    assert np.all(np.abs(mc.mean - closed["mean"]) <= 5 * np.sqrt(var / num_samples) + 1e-5)
    np.testing.assert_allclose(mc.epistemic_variance, var, rtol=5 * np.sqrt(2 / num_samples))
    np.testing.assert_allclose(mc.aleatoric_variance, NOISE, rtol=1e-6)


@pytest.fixture(scope="module")
def classifier():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 2)).astype("float32")
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)
    # Untrained, seeded weights: the Laplace takes any weights as theta*, and the tests
    # below check properties that hold at any theta*.
    init = keras.initializers.GlorotUniform
    model = keras.Sequential([
        keras.Input((2,)), keras.layers.Dense(8, activation="relu", kernel_initializer=init(4)),
        keras.layers.Dense(3, activation="softmax", kernel_initializer=init(5))])
    return model, x, labels


@pytest.mark.parametrize("hessian", [pytest.param("full"),
                                     pytest.param("kron", marks=pytest.mark.jax)])
def test_classification_probit_and_samples(classifier, hessian):
    model, x, labels = classifier
    laplace = LastLayerLaplace(model, "classification", hessian=hessian).fit(x, labels)
    assert laplace.optimize_prior_precision() > 0
    far = 30 * np.array([[1, 0], [0, 1], [-1, -1], [1, -1]], "float32")
    probit, map_probs = laplace.predict(far), model.predict(far, verbose=0)
    np.testing.assert_allclose(probit.sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(probit.max(axis=1) < map_probs.max(axis=1))
    # Sampled logits are exactly N(f*, J S J^T): each covariance entry's sample estimate
    # has sd sqrt((S_kk S_ll + S_kl^2) / T); five sd (the mean: sqrt(S_kk / T)).
    num_samples = 3000
    logits = tfp_bnn.predict.sample(laplace.predictive_model(seed=5), x[:4], num_samples)
    phi = laplace._phi(x[:4])
    cov = laplace.eigenbasis.output_covariance(phi, laplace.prior_precision)
    diag = np.diagonal(cov, axis1=1, axis2=2)
    assert np.all(np.abs(logits.mean(0) - phi @ laplace.map)
                  <= 5 * np.sqrt(diag / num_samples) + 1e-5)
    centred = logits - logits.mean(0)
    sample_cov = np.einsum("tnk,tnl->nkl", centred, centred) / (num_samples - 1)
    bound = 5 * np.sqrt((diag[:, :, None] * diag[:, None, :] + cov ** 2) / num_samples)
    assert np.all(np.abs(sample_cov - cov) <= bound + 1e-6)


def test_probit_ignores_the_logit_shift_common_to_all_classes():
    # A shift c 1 of all logits leaves the softmax unchanged: centring removes its variance.
    spread = np.diag([0.5, 1.0, 2.0])
    centre = np.eye(3) - 1 / 3
    np.testing.assert_allclose(_centred(spread + 7.0 * np.ones((3, 3))),
                               centre @ spread @ centre, atol=1e-12)


def test_refusals_are_one_line_and_name_the_problem(classifier):
    model, x, labels = classifier
    with pytest.raises(ValueError, match="activation 'softmax'; likelihood='regression'"):
        LastLayerLaplace(model, "regression")
    with pytest.raises(ValueError, match="`hessian` must be one of"):
        LastLayerLaplace(model, hessian="diag")
    with pytest.raises(ValueError, match="`noise_variance` is only for"):
        LastLayerLaplace(model, noise_variance=1.0)
    with pytest.raises(ValueError, match="fit"):
        LastLayerLaplace(model).predict(x)
    with pytest.raises(ValueError, match="`y` has 59 examples but `x` has 60"):
        LastLayerLaplace(model).fit(x, labels[:-1])
    with pytest.raises(ValueError, match="`y` must hold int class labels in 0..2"):
        LastLayerLaplace(model).fit(x, labels + 1)
    with pytest.raises(ValueError, match=r"`y` must have shape \(60, 3\) or \(60,\)"):
        LastLayerLaplace(model).fit(x, np.zeros((60, 2)))
    inputs = keras.Input((2,))
    pooled = keras.Model(inputs, keras.layers.Softmax()(keras.layers.Dense(3)(inputs)))
    with pytest.raises(ValueError, match="from a keras.layers.Dense of the model itself"):
        LastLayerLaplace(pooled)
    shared = keras.layers.Dense(2)
    two_calls = keras.Model(inputs, shared(shared(inputs)))
    with pytest.raises(ValueError, match="is shared"):
        LastLayerLaplace(two_calls)
    with pytest.raises(ValueError, match="one output, got 2"):
        LastLayerLaplace(keras.Model(inputs, [shared(inputs), shared(inputs)]))


def test_a_hessian_that_cannot_fit_is_refused_before_fitting(monkeypatch):
    # A 4,096 -> 1,000 last layer: "full" would be a 4,097,000^2 float64 matrix (134 TB);
    # it was allocated in `fit` (numpy's MemoryError, or the kernel's OOM killer).
    wide = keras.Sequential([keras.Input((4096,)), keras.layers.Dense(1000)])
    with pytest.raises(ValueError, match=r"^The 'full' Hessian of the last Dense '.*' "
                                         r"\(4,097 inputs x 1,000 outputs: 4,097,000x4,097,000 "
                                         r"float64, held 4 times while it is built and "
                                         r"decomposed\) would need .* GiB, over half of this "
                                         r"machine's memory .*; use hessian='kron' or a smaller "
                                         r"last layer\.$"):
        LastLayerLaplace(wide, "regression", hessian="full")
    # "kron" needs 4 * 8 * (4,097^2 + 1,000^2) bytes = 0.57 GB: refused on a 1 GiB machine.
    assert LastLayerLaplace(wide, "regression", hessian="kron").hessian == "kron"
    monkeypatch.setattr(_memory, "memory_bytes", lambda: 2**30)
    with pytest.raises(ValueError, match=r"^The 'kron' Hessian .*4,097x4,097 and 1,000x1,000 "
                                         r"float64.*; use a smaller last layer\.$"):
        LastLayerLaplace(wide, "regression", hessian="kron")

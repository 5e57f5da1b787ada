"""layer_norm: exact for a constant input; divisor and methods against sampling."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.moments import Moments
from tfp_bnn.moments import layer_norm
from tfp_bnn.testing.moments_reference import assert_within_se
from tfp_bnn.testing.moments_reference import sample_moments

SAMPLES = 20000
WIDTH = 8


def _norm_params(rng):
    return (1.0 + 0.2 * rng.normal(size=WIDTH), rng.uniform(0.01, 0.05, size=WIDTH),
            0.2 * rng.normal(size=WIDTH), rng.uniform(0.01, 0.05, size=WIDTH))


def _f32(*values):
    return [None if v is None else tf.constant(v, tf.float32) for v in values]


def _sampled_layer_norm(rng, x, params, epsilon=1e-3):
    gamma_loc, gamma_var, beta_loc, beta_var = params
    gamma = gamma_loc + np.sqrt(gamma_var) * rng.normal(size=(SAMPLES, 1, 1, WIDTH))
    beta = beta_loc + np.sqrt(beta_var) * rng.normal(size=(SAMPLES, 1, 1, WIDTH))
    centred = x - x.mean(-1, keepdims=True)
    return gamma * centred / np.sqrt(centred.var(-1, keepdims=True) + epsilon) + beta


def test_matches_keras_layer_normalization():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, WIDTH)).astype(np.float32)
    gamma, _, beta, _ = _norm_params(rng)
    layer = keras.layers.LayerNormalization(epsilon=1e-3)
    layer.build(x.shape)
    layer.set_weights([gamma, beta])
    out = layer_norm(Moments.deterministic(x), *_f32(gamma, None, beta, None))
    assert out.cov is None
    np.testing.assert_allclose(out.mean, layer(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["diagonal", "full"])
def test_constant_input_random_gain_and_bias_is_exact(mode):
    rng = np.random.default_rng(1)
    x = 2.0 * rng.normal(size=(2, 3, WIDTH))
    params = _norm_params(rng)
    mc = sample_moments(_sampled_layer_norm(rng, np.broadcast_to(x, (SAMPLES,) + x.shape), params),
                        mode)
    out = layer_norm(Moments.deterministic(x, mode), *_f32(*params))
    assert_within_se(out.mean, mc["mean"], mc["mean_se"], "mean")
    if mode == "full":
        assert_within_se(out.cov, mc["cov"], mc["cov_se"], "covariance")
    else:
        assert_within_se(out.cov, mc["var"], mc["var_se"], "variance")


def _relative_error(estimate, reference):
    return float(np.linalg.norm(np.asarray(estimate) - reference) / np.linalg.norm(reference))


def _random_input(rng, noise):
    """Means ~ N(0, 1) per feature; correlated noise of std ~`noise` per entry.

    Returns the mean [2, 3, I], the full covariance [2, 3I, 3I] and
    SAMPLES draws [S, 2, 3, I] of x.
    """
    n = 3 * WIDTH
    mean = rng.normal(size=(2, 3, WIDTH))
    factor = (rng.normal(size=(2, n, n)) / np.sqrt(n) + np.eye(n)) * noise / np.sqrt(2.0)
    cov = factor @ np.swapaxes(factor, 1, 2)
    x = mean + np.einsum("bij,sbj->sbi", factor,
                         rng.normal(size=(SAMPLES, 2, n))).reshape(SAMPLES, 2, 3, WIDTH)
    return mean, cov, x


@pytest.mark.parametrize("method", ["linearized", "constant"])
def test_propagated_divisor_beats_the_means_only_divisor(method):
    """Noise as large as the spread of the means (both ~1 per feature).

    Measured (seed 2, 2e4 samples), relative error of the mean / of the
    variances with our divisor vs the seed's means-only divisor:
    "constant" 0.032 vs 0.52 / 0.080 vs 2.36; "linearized" 0.032 vs 0.52 /
    0.057 vs 2.06. The means-only divisor is too small, so it inflates
    both. The Monte Carlo part of these figures is ~0.01
    (sqrt(2 / 2e4) for a variance), far below the gap.
    """
    rng = np.random.default_rng(2)
    mean, cov, x = _random_input(rng, 1.0)
    params = _norm_params(rng)
    mc = sample_moments(_sampled_layer_norm(rng, x, params), "diagonal")
    errors = {}
    for propagate in (True, False):
        out = layer_norm(Moments(*_f32(mean, cov), "full"), *_f32(*params),
                         propagate_variance=propagate, method=method)
        errors[propagate] = (_relative_error(out.mean, mc["mean"]),
                             _relative_error(out.variance(), mc["var"]))
    print(method, "relative errors (mean, variance): propagated", errors[True], "means only",
          errors[False])
    assert errors[True][0] < errors[False][0] / 5
    assert errors[True][1] < errors[False][1] / 5


# Measured relative errors of the variances (2e4 samples, seed 2),
# noise std -> (mode, method) -> error; see test_linearized_beats_constant.
MEASURED_VARIANCE_ERRORS = {
    0.2: {("full", "constant"): 0.099, ("full", "linearized"): 0.015,
          ("diagonal", "constant"): 0.111, ("diagonal", "linearized"): 0.066},
    1.0: {("full", "constant"): 0.080, ("full", "linearized"): 0.057,
          ("diagonal", "constant"): 0.108, ("diagonal", "linearized"): 0.095},
}


@pytest.mark.parametrize("noise", sorted(MEASURED_VARIANCE_ERRORS))
def test_linearized_beats_constant(noise):
    """The Jacobian LayerNorm against the constant divisor, vs 2e4 samples.

    Noise std 0.2 (small against the spread ~1 of the means: the regime of
    a transformer block) and 1.0 (as large as the spread). Measured
    relative errors of the variances (Frobenius, all entries):

        noise   mode       constant   linearized
        0.2     full       0.099      0.015
        0.2     diagonal   0.111      0.066
        1.0     full       0.080      0.057
        1.0     diagonal   0.108      0.095

    and of the full covariance: 0.19 vs 0.032 (noise 0.2), 0.18 vs 0.094
    (noise 1.0).
    The constant divisor keeps the radial part of the noise, which a
    sampled LayerNorm removes (it rescales every sample); the Jacobian
    removes it to first order, exactly so in full mode and only through
    the diagonal in diagonal mode (which lacks the cross-feature
    covariance along the mean direction). At noise 1.0 the curvature the
    first-order rule ignores takes over. The means are identical (0.005,
    0.032). Monte Carlo part ~sqrt(2 / 2e4) = 0.01 for a variance, less
    for the relative Frobenius error; tolerances 1.25x measured + 0.005.
    """
    rng = np.random.default_rng(2)
    mean, cov, x = _random_input(rng, noise)
    params = _norm_params(rng)
    mc = sample_moments(_sampled_layer_norm(rng, x, params), "full")
    variances = np.diagonal(mc["cov"], axis1=1, axis2=2).reshape(mean.shape)
    errors = {}
    for mode in ("full", "diagonal"):
        moments = Moments(*_f32(mean, cov), "full").as_mode(mode)
        for method in ("constant", "linearized"):
            out = layer_norm(moments, *_f32(*params), method=method)
            errors[mode, method] = _relative_error(out.variance(), variances)
            if mode == "full":
                errors["cov", method] = _relative_error(out.cov, mc["cov"])
    print(f"noise {noise}: relative errors of the variances", errors)
    for key, measured in MEASURED_VARIANCE_ERRORS[noise].items():
        assert errors[key] < 1.25 * measured + 0.005, (key, errors[key])
    for mode in ("full", "diagonal"):
        assert errors[mode, "linearized"] < errors[mode, "constant"]
    assert errors["cov", "linearized"] < errors["cov", "constant"]
    if noise == 0.2:
        assert errors["full", "linearized"] < errors["full", "constant"] / 4
        assert errors["cov", "linearized"] < errors["cov", "constant"] / 4


@pytest.mark.parametrize("method", ["linearized", "constant"])
@pytest.mark.parametrize("random_input", [True, False])
def test_diagonal_is_diagonal_of_full(random_input, method):
    rng = np.random.default_rng(3)
    mean, var = rng.normal(size=(2, 3, WIDTH)), rng.uniform(0.1, 1.0, size=(2, 3, WIDTH))
    params = _f32(*_norm_params(rng))
    x = Moments(*_f32(mean, var), "diagonal") if random_input else Moments.deterministic(mean)
    diag = layer_norm(x, *params, method=method)
    full = layer_norm(x.as_mode("full"), *params, method=method)
    np.testing.assert_allclose(diag.mean, full.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(diag.cov, full.variance(), rtol=1e-5, atol=1e-7)


def test_vector_input():
    rng = np.random.default_rng(4)
    mean, var = rng.normal(size=(2, WIDTH)), rng.uniform(0.1, 1.0, size=(2, WIDTH))
    params = _f32(*_norm_params(rng))
    vector = layer_norm(Moments(*_f32(mean, var), "diagonal").as_mode("full"), *params)
    sequence = layer_norm(Moments(*_f32(mean[:, None], var[:, None]), "diagonal").as_mode("full"),
                          *params)
    assert vector.mean.shape == (2, WIDTH) and vector.cov.shape == (2, WIDTH, WIDTH)
    np.testing.assert_allclose(vector.cov, sequence.cov, rtol=1e-6)


def test_bad_shapes_name_the_argument():
    x = Moments.deterministic(tf.ones([2, 3, WIDTH]))
    with pytest.raises(ValueError, match="`gamma_loc` must have shape \\(8,\\)"):
        layer_norm(x, tf.ones([3]), None, None, None)
    with pytest.raises(ValueError, match="`beta_var` must have shape \\(8,\\)"):
        layer_norm(x, None, None, tf.ones([WIDTH]), tf.ones([2]))
    with pytest.raises(ValueError, match="`method` must be one of"):
        layer_norm(x, None, None, None, None, method="taylor")


@pytest.mark.parametrize("method", ["linearized", "constant"])
@pytest.mark.parametrize("mode", ["full", "diagonal"])
def test_compiles_under_xla(mode, method):
    rng = np.random.default_rng(5)
    n = 3 * WIDTH
    x = Moments(*_f32(rng.normal(size=(2, 3, WIDTH)), np.eye(n)[None].repeat(2, 0)), "full")
    x = x.as_mode(mode)
    params = _f32(*_norm_params(rng))

    @tf.function(jit_compile=True)
    def run(x, params):
        out = layer_norm(x, *params, method=method)
        return out.mean, out.cov

    mean, cov = run(x, params)
    eager = layer_norm(x, *params, method=method)
    np.testing.assert_allclose(mean, eager.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cov, eager.cov, rtol=1e-4, atol=1e-5)

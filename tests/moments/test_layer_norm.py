"""layer_norm: exact for a constant input, the corrected divisor otherwise."""

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


def test_propagated_divisor_beats_the_means_only_divisor():
    """Noise as large as the spread of the means (both ~1 per feature).

    Measured (seed 2, 2e4 samples): relative error of the mean 0.032 with
    our divisor vs 0.52 with the seed's means-only divisor; of the
    variances 0.079 vs 2.36. The means-only divisor is too small, so it
    inflates both. The Monte Carlo part of these figures is ~0.01
    (sqrt(2 / 2e4) for a variance), far below the gap.
    """
    rng = np.random.default_rng(2)
    n = 3 * WIDTH
    mean = rng.normal(size=(2, 3, WIDTH))
    factor = rng.normal(size=(2, n, n)) / np.sqrt(n) + np.eye(n)
    cov = factor @ np.swapaxes(factor, 1, 2) / 2.0
    x = mean + np.einsum("bij,sbj->sbi", factor / np.sqrt(2.0),
                         rng.normal(size=(SAMPLES, 2, n))).reshape(SAMPLES, 2, 3, WIDTH)
    params = _norm_params(rng)
    mc = sample_moments(_sampled_layer_norm(rng, x, params), "diagonal")
    errors = {}
    for propagate in (True, False):
        out = layer_norm(Moments(*_f32(mean, cov), "full"), *_f32(*params),
                         propagate_variance=propagate)
        errors[propagate] = (_relative_error(out.mean, mc["mean"]),
                             _relative_error(out.variance(), mc["var"]))
    print("relative errors (mean, variance): propagated", errors[True], "means only",
          errors[False])
    assert errors[True][0] < errors[False][0]
    assert errors[True][1] < errors[False][1]


@pytest.mark.parametrize("random_input", [True, False])
def test_diagonal_is_diagonal_of_full(random_input):
    rng = np.random.default_rng(3)
    mean, var = rng.normal(size=(2, 3, WIDTH)), rng.uniform(0.1, 1.0, size=(2, 3, WIDTH))
    params = _f32(*_norm_params(rng))
    x = Moments(*_f32(mean, var), "diagonal") if random_input else Moments.deterministic(mean)
    diag = layer_norm(x, *params)
    full = layer_norm(x.as_mode("full"), *params)
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


def test_compiles_under_xla():
    rng = np.random.default_rng(5)
    n = 3 * WIDTH
    x = Moments(*_f32(rng.normal(size=(2, 3, WIDTH)), np.eye(n)[None].repeat(2, 0)), "full")
    params = _f32(*_norm_params(rng))

    @tf.function(jit_compile=True)
    def run(x, params):
        out = layer_norm(x, *params)
        return out.mean, out.cov

    mean, cov = run(x, params)
    eager = layer_norm(x, *params)
    np.testing.assert_allclose(mean, eager.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cov, eager.cov, rtol=1e-4, atol=1e-5)

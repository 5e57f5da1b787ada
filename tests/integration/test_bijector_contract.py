"""Every flow bijector (planar, radial, Sylvester, batch norm) and chains of them:
log|det J| against the autodiff Jacobian, any batch shape, round trips where
invertible, finite values and gradients at extreme parameters.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tests.flows.bijector_cases import D
from tests.flows.bijector_cases import KINDS
from tests.flows.bijector_cases import TOL
from tests.flows.bijector_cases import autodiff_log_det
from tests.flows.bijector_cases import chain
from tests.flows.bijector_cases import make
from tests.flows.bijector_cases import raw_params

tfb = tfp.bijectors

CASES = {
    "planar": ["planar"],
    "radial": ["radial"],
    "sylvester": ["sylvester"],
    "batch_norm": ["batch_norm"],
    "planar_x3": ["planar"] * 3,
    "mixed": ["planar", "radial", "sylvester", "batch_norm"],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_log_det_matches_autodiff_jacobian(case, seed):
    rng = np.random.default_rng(seed)
    bijector = chain(CASES[case], rng)
    x = tf.constant(2.0 * rng.normal(size=(16, D)))
    expected = autodiff_log_det(bijector, x)
    # The draws are far from the identity, so the test sees every term.
    assert np.abs(expected).max() > 0.1
    actual = bijector.forward_log_det_jacobian(x, event_ndims=1).numpy()
    assert actual.shape == (16,)
    np.testing.assert_array_less(np.abs(actual - expected), TOL * (1.0 + np.abs(expected)))


@pytest.mark.parametrize("kind", KINDS)
def test_any_batch_shape(kind):
    rng = np.random.default_rng(4)
    bijector = make(kind, raw_params(kind, rng))
    x = rng.normal(size=(2, 3, D))
    y = bijector.forward(tf.constant(x)).numpy()
    log_det = bijector.forward_log_det_jacobian(tf.constant(x), event_ndims=1).numpy()
    assert y.shape == (2, 3, D) and log_det.shape == (2, 3)
    flat = tf.constant(x.reshape(6, D))
    np.testing.assert_allclose(y.reshape(6, D), bijector.forward(flat).numpy(), rtol=1e-12)
    np.testing.assert_allclose(log_det.reshape(6),
                               bijector.forward_log_det_jacobian(flat, event_ndims=1).numpy(),
                               rtol=1e-12)


@pytest.mark.parametrize("kinds", [["radial"], ["batch_norm"], ["radial", "batch_norm", "radial"]],
                         ids=["radial", "batch_norm", "radial_bn_radial"])
@pytest.mark.parametrize("beta_raw", [-4.0, 0.0, 3.0], ids=["contract", "mild", "expand"])
def test_round_trip_where_invertible(kinds, beta_raw):
    rng = np.random.default_rng(5)
    steps = []
    for kind in kinds:
        params = raw_params(kind, rng)
        if kind == "radial":
            params["beta_raw"] = np.float64(beta_raw)
        steps.append(make(kind, params))
    bijector = tfb.Chain(list(reversed(steps)))
    x = 3.0 * rng.normal(size=(32, D))
    y = bijector.forward(tf.constant(x)).numpy()
    assert np.abs(y - x).max() > 1e-2  # not the identity
    # A fresh tensor: TFP would otherwise return the cached x.
    back = bijector.inverse(tf.constant(y.copy())).numpy()
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-10 * (1.0 + np.abs(x).max()))
    ildj = bijector.inverse_log_det_jacobian(tf.constant(y.copy()), event_ndims=1).numpy()
    fldj = bijector.forward_log_det_jacobian(tf.constant(x), event_ndims=1).numpy()
    np.testing.assert_allclose(ildj, -fldj, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["planar", "sylvester"])
def test_no_closed_form_inverse(kind):
    bijector = make(kind, raw_params(kind, np.random.default_rng(6)))
    with pytest.raises(NotImplementedError):
        bijector.inverse(tf.ones((1, D), tf.float64))


def _extreme_params(kind, rng):
    """float32 raw parameters of magnitude 50 with random signs."""
    params = raw_params(kind, rng, dtype="float32")
    for name, value in params.items():
        params[name] = (50.0 * np.sign(rng.normal(size=value.shape))).astype("float32")
    if kind == "batch_norm":
        params["variance"] = rng.choice([0.0, 2500.0], size=D).astype("float32")
    return params


def _extreme_inputs(rng, params, kind):
    signs = np.sign(rng.normal(size=(4, D)))
    rows = [1e3 * signs[0], -1e3 * np.ones(D), np.zeros(D), 1e3 * signs[1] * (signs[2] > 0)]
    if kind == "radial":
        rows[2] = params["z0"]  # exactly at the centre: r = 0
    return np.stack(rows).astype("float32")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(6))
def test_finite_at_extreme_parameters(kind, seed):
    rng = np.random.default_rng(100 + seed)
    params = {k: tf.Variable(v) for k, v in _extreme_params(kind, rng).items()}
    x = tf.constant(_extreme_inputs(rng, {k: v.numpy() for k, v in params.items()}, kind))
    with tf.GradientTape() as tape:
        tape.watch(x)
        bijector = make(kind, params)
        y = bijector.forward(x)
        log_det = bijector.forward_log_det_jacobian(x, event_ndims=1)
        objective = tf.reduce_sum(y) + tf.reduce_sum(log_det)
    assert np.all(np.isfinite(y.numpy())), kind
    assert np.all(np.isfinite(log_det.numpy())), kind
    grads = tape.gradient(objective, list(params.values()) + [x])
    for name, grad in zip(list(params) + ["x"], grads):
        if grad is not None:
            assert np.all(np.isfinite(grad.numpy())), f"{kind}: gradient to {name}"
    if kind in ("radial", "batch_norm"):
        assert np.all(np.isfinite(bijector.inverse(tf.identity(y)).numpy()))

"""The flow bijectors: log|det J| against autodiff, inverses, constraints, edge cases."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_bnn.flows import BatchNormFlow
from tfp_bnn.flows import Planar
from tfp_bnn.flows import Radial
from tfp_bnn.flows import Sylvester

tfb = tfp.bijectors

D = 5
RANK = 3
KINDS = ("planar", "radial", "sylvester", "batch_norm")
# Log-determinants from the closed forms and from an LU of the autodiff
# Jacobian agree to a few thousand float64 ulps; a wrong term is off by O(0.01+).
TOL = 4096 * np.finfo(np.float64).eps


def _raw_params(kind, rng, scale=1.0, dim=D, rank=RANK, dtype="float64"):
    """Random parameters of one step, `scale` times standard normal draws."""
    shapes = {
        "planar": {"w": (dim,), "u": (dim,), "b": ()},
        "radial": {"z0": (dim,), "alpha_raw": (), "beta_raw": ()},
        "sylvester": {"householder": (rank, dim), "r_raw": (rank, rank),
                      "r_tilde_raw": (rank, rank), "b": (rank,)},
        "batch_norm": {"mean": (dim,), "variance": (dim,), "log_scale": (dim,),
                       "shift": (dim,)},
    }[kind]
    params = {name: (scale * rng.normal(size=shape)).astype(dtype)
              for name, shape in shapes.items()}
    if kind == "batch_norm":
        params["variance"] = np.abs(params["variance"])
    return params


def _make(kind, params):
    cls = {"planar": Planar, "radial": Radial, "sylvester": Sylvester,
           "batch_norm": BatchNormFlow}[kind]
    return cls(**params)


def _chain(kinds, rng, **kwargs):
    """tfb.Chain applying `kinds` in order (Chain applies its list last to first)."""
    steps = [_make(kind, _raw_params(kind, rng, **kwargs)) for kind in kinds]
    return tfb.Chain(list(reversed(steps)))


def _autodiff_log_det(bijector, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = bijector.forward(x)
    return tf.linalg.slogdet(tape.batch_jacobian(y, x))[1].numpy()


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
    bijector = _chain(CASES[case], rng)
    x = tf.constant(2.0 * rng.normal(size=(16, D)))
    expected = _autodiff_log_det(bijector, x)
    # The draws are far from the identity, so the test sees every term.
    assert np.abs(expected).max() > 0.1
    actual = bijector.forward_log_det_jacobian(x, event_ndims=1).numpy()
    assert actual.shape == (16,)
    np.testing.assert_array_less(np.abs(actual - expected), TOL * (1.0 + np.abs(expected)))


def test_full_rank_sylvester_log_det():
    rng = np.random.default_rng(3)
    bijector = _make("sylvester", _raw_params("sylvester", rng, rank=D))
    x = tf.constant(rng.normal(size=(8, D)))
    expected = _autodiff_log_det(bijector, x)
    actual = bijector.forward_log_det_jacobian(x, event_ndims=1).numpy()
    np.testing.assert_array_less(np.abs(actual - expected), TOL * (1.0 + np.abs(expected)))


@pytest.mark.parametrize("kind", KINDS)
def test_any_batch_shape(kind):
    rng = np.random.default_rng(4)
    bijector = _make(kind, _raw_params(kind, rng))
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
        params = _raw_params(kind, rng)
        if kind == "radial":
            params["beta_raw"] = np.float64(beta_raw)
        steps.append(_make(kind, params))
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
    bijector = _make(kind, _raw_params(kind, np.random.default_rng(6)))
    with pytest.raises(NotImplementedError):
        bijector.inverse(tf.ones((1, D), tf.float64))


def _extreme_params(kind, rng):
    """float32 raw parameters of magnitude 50 with random signs."""
    params = _raw_params(kind, rng, dtype="float32")
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
        bijector = _make(kind, params)
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


def test_degenerate_planar_stays_finite():
    # w^T u = -2500 D: softplus underflows and w^T u_hat rounds to -1, so the
    # step is singular in float32 at w^T z + b = 0; the log-det stays finite.
    w = tf.fill([D], tf.constant(-50.0))
    u = tf.fill([D], tf.constant(50.0))
    bijector = Planar(w, u, tf.constant(0.0))
    log_det = bijector.forward_log_det_jacobian(tf.zeros((1, D)), event_ndims=1).numpy()
    assert np.all(np.isfinite(log_det)) and log_det[0] < -50.0


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_planar_parameterization_keeps_it_invertible(scale):
    rng = np.random.default_rng(7)
    for _ in range(50):
        params = _raw_params("planar", rng, scale=scale)
        bijector = Planar(**params)
        w_dot_u_hat = float(tf.reduce_sum(bijector.w * bijector.u_hat()))
        a = float(np.dot(params["w"], params["u"]))
        m = -1.0 + np.logaddexp(0.0, a)  # > -1
        # w^T u_hat sums terms w_i u_i and (m - a) w_i^2 / ||w||^2: rounding is
        # relative to their magnitudes.
        magnitude = np.abs(params["w"] * params["u"]).sum() + abs(m - a)
        tol = 64 * np.finfo(np.float64).eps * (1.0 + magnitude)
        assert w_dot_u_hat >= -1.0 - tol
        assert abs(w_dot_u_hat - m) <= tol


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_radial_parameterization_keeps_it_invertible(scale):
    rng = np.random.default_rng(8)
    raw = scale * rng.normal(size=(200, 2))
    bijector = Radial(tf.zeros(D, tf.float64), raw[:, 0], raw[:, 1])
    alpha, beta = bijector.alpha.numpy(), bijector.beta.numpy()
    assert np.all(alpha > 0.0)
    assert np.all(beta >= -alpha)


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_sylvester_parameterization(scale):
    rng = np.random.default_rng(9)
    for _ in range(20):
        bijector = _make("sylvester", _raw_params("sylvester", rng, scale=scale))
        q = bijector.q().numpy()
        np.testing.assert_allclose(q.T @ q, np.eye(RANK), atol=1e-12)
        r, r_tilde = bijector.r().numpy(), bijector.r_tilde().numpy()
        assert np.array_equal(r, np.triu(r)) and np.array_equal(r_tilde, np.triu(r_tilde))
        assert np.all(np.diag(r) * np.diag(r_tilde) > -1.0)

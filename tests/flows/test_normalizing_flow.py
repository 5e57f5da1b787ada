"""NormalizingFlow: the Keras layer that owns a chain of flow steps."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn.flows import FLOWS
from tfp_bnn.flows import NormalizingFlow

D = 4
MIXED = ["planar", "radial", "sylvester", "batch_norm"]


def _perturb(flow, seed, scale=0.5):
    """Moves every trainable parameter well away from its near-identity start."""
    rng = np.random.default_rng(seed)
    for var in flow.trainable_variables:
        var.assign(var.numpy() + scale * rng.normal(size=var.shape).astype(var.dtype))


@pytest.mark.parametrize("flows", list(FLOWS) + [MIXED], ids=list(FLOWS) + ["mixed"])
@pytest.mark.parametrize("shape", [(6, D), (2, 3, D)], ids=["rank2", "rank3"])
def test_shapes(flows, shape):
    flow = NormalizingFlow(flows, length=3 if isinstance(flows, str) else None, seed=0)
    z = keras.random.normal(shape, seed=1)
    for training in (False, True):
        y, log_det = flow(z, training=training)
        assert tuple(y.shape) == shape and tuple(log_det.shape) == shape[:-1]
        assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(log_det.numpy()))
    symbolic_y, symbolic_log_det = flow(keras.Input(shape[1:]))
    assert tuple(symbolic_y.shape) == (None,) + shape[1:]
    assert tuple(symbolic_log_det.shape) == (None,) + shape[1:-1]


def test_step_names():
    assert NormalizingFlow("radial").step_names == ["radial"]
    assert NormalizingFlow("planar", length=3).step_names == ["planar"] * 3
    assert NormalizingFlow(["planar", "radial"]).step_names == ["planar", "radial"]
    cyclic = NormalizingFlow(["planar", "radial"], length=3)
    assert cyclic.step_names == ["planar", "radial", "planar"]
    assert NormalizingFlow([]).step_names == []


@pytest.mark.parametrize("kwargs", [dict(length=0), dict(flows=[]), dict(flows=MIXED, length=0)])
def test_length_zero_is_the_identity(kwargs):
    flow = NormalizingFlow(**kwargs)
    z = keras.random.normal((5, D), seed=2)
    y, log_det = flow(z, training=True)
    np.testing.assert_array_equal(y.numpy(), z.numpy())
    np.testing.assert_array_equal(log_det.numpy(), np.zeros(5))
    assert flow.weights == []
    bijector_y = flow.bijector().forward(z)
    np.testing.assert_array_equal(bijector_y.numpy(), z.numpy())


@pytest.mark.parametrize("flows", ["planar", "radial", "sylvester", "batch_norm"])
def test_starts_near_the_identity(flows):
    flow = NormalizingFlow(flows, length=2, seed=3)
    z = keras.random.normal((256, D), seed=4)
    y, log_det = flow(z)
    assert np.abs(y.numpy() - z.numpy()).max() < 0.05
    assert np.abs(log_det.numpy()).max() < 0.05


def test_call_matches_bijector_and_autodiff_jacobian():
    flow = NormalizingFlow(MIXED * 2, sylvester_rank=3, seed=5, dtype="float64")
    flow.build((None, D))
    _perturb(flow, 6)
    z = tf.constant(np.random.default_rng(7).normal(size=(16, D)))
    with tf.GradientTape() as tape:
        tape.watch(z)
        y, log_det = flow(z, training=False)
    jacobian_log_det = tf.linalg.slogdet(tape.batch_jacobian(y, z))[1].numpy()
    assert np.abs(jacobian_log_det).max() > 0.1  # far from the identity
    np.testing.assert_allclose(log_det.numpy(), jacobian_log_det, rtol=1e-9, atol=1e-9)
    chain = flow.bijector(training=False)
    np.testing.assert_allclose(chain.forward(z).numpy(), y.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(chain.forward_log_det_jacobian(z, event_ndims=1).numpy(),
                               log_det.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.jax
def test_log_det_matches_a_finite_difference_jacobian_on_every_backend():
    # float32 (JAX computes in float32 unless x64 is switched on): central
    # differences with h = 1e-3 are off by ~eps/h ~ 1e-4 per entry, so the
    # log-determinants agree to ~1e-3; a wrong term is off by O(0.01+).
    flow = NormalizingFlow(MIXED, sylvester_rank=3, seed=5)
    flow.build((None, D))
    _perturb(flow, 6)
    z = np.random.default_rng(7).normal(size=(6, D))
    h = 1e-3
    steps = h * np.eye(D)
    shifted = np.concatenate([(z[:, None] + steps).reshape(-1, D),
                              (z[:, None] - steps).reshape(-1, D)]).astype("float32")
    # One compiled call (on JAX an eager call compiles every op on its own).
    inputs = keras.Input((D,))
    model = keras.Model(inputs, flow(inputs))
    y, log_det = model.predict_on_batch(np.concatenate([z.astype("float32"), shifted]))
    plus, minus = y[6:].astype(np.float64).reshape(2, 6, D, D)
    jacobian = np.swapaxes((plus - minus) / (2 * h), -1, -2)  # [row, output, input]
    reference = np.linalg.slogdet(jacobian)[1]
    assert np.abs(reference).max() > 0.1  # far from the identity
    np.testing.assert_allclose(log_det[:6], reference, atol=2e-3)


def test_gradients_reach_every_trainable_variable():
    flow = NormalizingFlow(MIXED, seed=8)
    z = keras.random.normal((32, D), seed=9)
    with tf.GradientTape() as tape:
        y, log_det = flow(z, training=True)
        objective = tf.reduce_mean(tf.reduce_sum(tf.square(y - 1.0), -1) - log_det)
    grads = tape.gradient(objective, flow.trainable_variables)
    for var, grad in zip(flow.trainable_variables, grads):
        assert grad is not None and np.all(np.isfinite(grad.numpy())), var.path
        assert np.any(grad.numpy() != 0.0), var.path


def test_batch_norm_statistics():
    flow = NormalizingFlow("batch_norm", momentum=0.9, epsilon=1e-3)
    z = (3.0 + 2.0 * keras.random.normal((2, 64, D), seed=10)).numpy()
    y, log_det = flow(z, training=True)
    # Batch statistics over every leading axis: standardized outputs.
    mean, var = z.reshape(-1, D).mean(0), z.reshape(-1, D).var(0)
    np.testing.assert_allclose(y.numpy(), (z - mean) / np.sqrt(var + 1e-3), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(log_det.numpy(), np.full((2, 64), -0.5 * np.log(var + 1e-3).sum()),
                               rtol=1e-5)
    step = flow.steps[0]
    np.testing.assert_allclose(step["moving_mean"].numpy(), 0.1 * mean, rtol=1e-5)
    np.testing.assert_allclose(step["moving_variance"].numpy(), 0.9 + 0.1 * var, rtol=1e-5)
    # Inference: the moving statistics, and no update.
    y, log_det = flow(z, training=False)
    mm, mv = step["moving_mean"].numpy(), step["moving_variance"].numpy()
    np.testing.assert_allclose(y.numpy(), (z - mm) / np.sqrt(mv + 1e-3), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(step["moving_mean"].numpy(), mm)


def test_seeded_initialisation():
    a, b, c = (NormalizingFlow(MIXED, seed=s) for s in (11, 11, 12))
    for flow in (a, b, c):
        flow.build((None, D))
    for va, vb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    assert not np.array_equal(a.weights[0].numpy(), c.weights[0].numpy())


def test_config_round_trip():
    flow = NormalizingFlow(["sylvester", "planar"], length=5, sylvester_rank=2, momentum=0.5,
                           epsilon=1e-4, seed=3, name="nf")
    config = flow.get_config()
    assert NormalizingFlow.from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(flow))
    assert isinstance(restored, NormalizingFlow) and restored.get_config() == config


def test_keras_file_round_trip():
    inputs = keras.Input((D,))
    y, log_det = NormalizingFlow(MIXED, length=5, sylvester_rank=2, seed=13)(inputs)
    model = keras.Model(inputs, [y, log_det])
    flow = model.layers[1]
    _perturb(flow, 14)
    z = np.random.default_rng(15).normal(size=(8, D)).astype("float32")
    flow(z, training=True)  # moves the batch-norm statistics off their start
    expected = [out.numpy() for out in model(z, training=False)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "flow.keras")
        model.save(path)
        loaded = keras.models.load_model(path, safe_mode=True)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(expected, loaded(z, training=False)):
        np.testing.assert_array_equal(a, b.numpy())


def _target_log_prob(y):
    """A shifted, anisotropic Gaussian target: N([2, -1], diag([0.5, 2])^2)."""
    loc = tf.constant([2.0, -1.0])
    scale = tf.constant([0.5, 2.0])
    standard = (y - loc) / scale
    return tf.reduce_sum(-0.5 * tf.square(standard) - tf.math.log(scale)
                         - 0.5 * np.log(2 * np.pi), axis=-1)


def _reverse_kl_loss(y_true, y_pred):
    """MC estimate of KL(q_K || target) - E[log q0(z0)] (a constant): -log p(y) - log|det J|."""
    return -_target_log_prob(y_pred[:, :2]) - y_pred[:, 2]


def _reverse_kl(flow, z0):
    y, log_det = flow(z0, training=False)
    log_q0 = tf.reduce_sum(-0.5 * tf.square(z0) - 0.5 * np.log(2 * np.pi), axis=-1)
    return float(tf.reduce_mean(log_q0 - log_det - _target_log_prob(y)))


def test_fit_moves_the_flow_towards_a_target():
    flow = NormalizingFlow(["planar", "radial", "sylvester", "batch_norm"], length=4, seed=16)
    inputs = keras.Input((2,))
    y, log_det = flow(inputs)
    model = keras.Model(inputs, keras.ops.concatenate([y, log_det[:, None]], axis=-1))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=_reverse_kl_loss,
                  jit_compile=False)
    z0 = np.random.default_rng(17).normal(size=(1024, 2)).astype("float32")
    held_out = np.random.default_rng(18).normal(size=(4096, 2)).astype("float32")
    before = _reverse_kl(flow, held_out)
    model.fit(z0, np.zeros((1024, 1), "float32"), batch_size=128, epochs=8, verbose=0)
    after = _reverse_kl(flow, held_out)
    # KL(N(0, I) || target) = 9.25 nats at the start (the flow starts near the
    # identity); the chain can reach 0 (batch norm alone is an affine map).
    assert before > 9.0
    assert after < 0.5, (before, after)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(flows="spline"), "flows"),
        (dict(flows=3), "flows"),
        (dict(flows=["planar", 1]), "flows"),
        (dict(flows=["planar", "real_nvp"]), "flows"),
        (dict(flows=[], length=2), "flows"),
        (dict(length=-1), "length"),
        (dict(length=1.5), "length"),
        (dict(length=True), "length"),
        (dict(length="2"), "length"),
        (dict(sylvester_rank=0), "sylvester_rank"),
        (dict(sylvester_rank=2.5), "sylvester_rank"),
        (dict(momentum=1.0), "momentum"),
        (dict(momentum="high"), "momentum"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        NormalizingFlow(**kwargs)


def test_bad_build_and_bijector_requests():
    with pytest.raises(ValueError, match="`sylvester_rank`"):
        NormalizingFlow("sylvester", sylvester_rank=5).build((None, 3))
    with pytest.raises(ValueError, match="last input dimension"):
        NormalizingFlow("planar").build((None, None))
    with pytest.raises(ValueError, match="not built"):
        NormalizingFlow("planar").bijector()
    flow = NormalizingFlow(["planar", "batch_norm"])
    flow.build((None, D))
    with pytest.raises(ValueError, match="`training`"):
        flow.bijector(training=True)

"""BatchEnsembleDense: member m computes ((x o r_m) W) o s_m + b_m; a BatchEnsemble MLP
trains with MemberLoss and predicts the mixture of its members."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers._tracing import sample_trace

M = 3
RNG = np.random.default_rng(1)


def _weights(layer):
    return [ops.convert_to_numpy(w).astype(np.float64) for w in
            (layer.kernel, layer.input_fast_weight, layer.output_fast_weight)] + \
        ([ops.convert_to_numpy(layer.bias).astype(np.float64)] if layer.use_bias else [])


def _member(x, weights, m):
    kernel, r, s = weights[:3]
    y = ((x.astype(np.float64) * r[m]) @ kernel) * s[m]
    return y + weights[3][m] if len(weights) == 4 else y


@pytest.mark.jax
@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 5), (4, 2, 5)], ids=["rank2", "rank3"])
def test_tile_m_is_member_m_formula(shape, use_bias):
    layer = layers.BatchEnsembleDense(3, num_members=M, use_bias=use_bias,
                                      bias_initializer="random_normal")
    x = RNG.normal(size=(M,) + shape).astype("float32")   # tile m: x[m]
    out = ops.convert_to_numpy(layer(x.reshape((-1,) + shape[1:])))
    weights = _weights(layer)
    assert out.shape == (M * shape[0],) + shape[1:-1] + (3,)
    for m in range(M):
        np.testing.assert_allclose(out[m * shape[0]:(m + 1) * shape[0]],
                                   _member(x[m], weights, m), rtol=1e-5, atol=1e-5)
    # Every member differs from the others on the same inputs.
    same = layer(np.concatenate([x[0]] * M))
    tiles = ops.convert_to_numpy(same).reshape((M, -1))
    assert np.abs(tiles[0] - tiles[1]).max() > 1e-3 and np.abs(tiles[1] - tiles[2]).max() > 1e-3


@pytest.mark.jax
def test_inside_a_trace_sample_s_is_member_s_mod_m():
    layer = layers.BatchEnsembleDense(2, num_members=M, activation="tanh",
                                      bias_initializer="random_normal")
    x = RNG.normal(size=(4, 5)).astype("float32")
    layer(np.concatenate([x] * M))
    weights = _weights(layer)
    with sample_trace(2 * M):
        out = ops.convert_to_numpy(layer(np.concatenate([x] * (2 * M))))
    for s in range(2 * M):
        np.testing.assert_allclose(out[s * 4:(s + 1) * 4], np.tanh(_member(x, weights, s % M)),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.jax
def test_a_batch_that_is_not_m_tiles_is_refused():
    with pytest.raises(ValueError, match="takes a batch of T = 3 tiles of B rows each .* got 4 "
                                         "rows. Put `tfp_bnn.layers.EnsembleTile`"):
        layers.BatchEnsembleDense(2, num_members=3)(np.zeros((4, 5), "float32"))


def mlp(inputs=4, classes=3):
    """tile -> BatchEnsembleDense -> BatchEnsembleDense -> untile."""
    x = keras.Input((inputs,))
    hidden = layers.EnsembleTile(M)(x)
    hidden = layers.BatchEnsembleDense(16, num_members=M, activation="relu")(hidden)
    logits = layers.BatchEnsembleDense(classes, num_members=M)(hidden)
    return keras.Model(x, layers.EnsembleUntile(M)(logits))


X, Y = checks.classification_data((4,))


class TestMlp(checks.TrainedClassifierChecks):
    build = staticmethod(mlp)
    num_members = M
    data = (X, Y)
    seed = 3

    def check_loaded(self, loaded):
        checks.assert_predictive_is_the_mixture(loaded, X[:10], M)


@pytest.mark.jax
def test_mlp_trains_and_predicts_under_mixed_float16(mixed_float16):
    keras.utils.set_random_seed(3)
    model = mlp()
    assert model.layers[2].compute_dtype == "float16"
    checks.assert_trains_under_mixed_float16(model, X, Y, M)

"""PackedDense: a block-diagonal Dense whose group g maps input block g to output block g;
member m depends on its own groups only; a packed MLP trains with MemberLoss and predicts the
mixture of its members."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers

M = 3
RNG = np.random.default_rng(5)


def block_diagonal(kernel, groups):
    """The full [in, out] matrix of a grouped kernel [in / G, out]: block g on the diagonal."""
    per_in, out = kernel.shape
    per_out = out // groups
    full = np.zeros((per_in * groups, out))
    for g in range(groups):
        full[g * per_in:(g + 1) * per_in, g * per_out:(g + 1) * per_out] = \
            kernel[:, g * per_out:(g + 1) * per_out]
    return full


def _numpy(layer, x):
    kernel = ops.convert_to_numpy(layer.kernel).astype(np.float64)
    bias = ops.convert_to_numpy(layer.bias).astype(np.float64)
    return x.astype(np.float64) @ block_diagonal(kernel, layer.groups) + bias


@pytest.mark.jax
@pytest.mark.parametrize("init, in_width, out_width", [
    ({"units": 6, "first": True}, 5, 12),            # one group: a Dense of the shared input
    ({"units": 6}, 12, 12),                          # M groups
    ({"units": 6, "gamma": 2}, 12, 12),              # 2 groups per member
    ({"units": 4, "last": True}, 12, 12),            # M * units outputs
    ({"units": 8, "alpha": 1.5, "gamma": 2}, 18, 12),
], ids=["first", "inner", "gamma2", "last", "alpha1.5"])
@pytest.mark.parametrize("lead", [(4,), (4, 2)], ids=["rank2", "rank3"])
def test_output_is_the_block_diagonal_product(init, in_width, out_width, lead):
    layer = layers.PackedDense(num_members=M, bias_initializer="random_normal", **init)
    x = RNG.normal(size=lead + (in_width,)).astype("float32")
    out = ops.convert_to_numpy(layer(x))
    assert out.shape == lead + (out_width,) == layer.compute_output_shape(x.shape)
    np.testing.assert_allclose(out, _numpy(layer, x), rtol=1e-5, atol=1e-5)


@pytest.mark.jax
@pytest.mark.parametrize("gamma", [1, 2])
def test_a_group_depends_on_its_own_weights_and_inputs_only(gamma):
    layer = layers.PackedDense(8, num_members=2, gamma=gamma, bias_initializer="random_normal")
    x = RNG.normal(size=(5, 16)).astype("float32")
    out = ops.convert_to_numpy(layer(x))
    groups, width = layer.groups, 16 // layer.groups
    kernel, bias = (ops.convert_to_numpy(w) for w in (layer.kernel, layer.bias))
    for g in range(groups):
        own = slice(g * width, (g + 1) * width)
        others = np.ones(16, bool)
        others[own] = False
        changed_kernel, changed_bias = kernel.copy(), bias.copy()
        changed_kernel[:, own] += 1.0
        changed_bias[own] += 1.0
        layer.set_weights([changed_kernel, changed_bias])
        changed_x = x.copy()
        changed_x[:, own] += 1.0    # group g's input block
        after = ops.convert_to_numpy(layer(changed_x))
        layer.set_weights([kernel, bias])
        np.testing.assert_array_equal(after[:, others], out[:, others])
        assert np.abs(after[:, own] - out[:, own]).min() > 1e-3


def mlp(inputs=4, classes=3):
    """first -> inner -> last -> PackedOutput."""
    return keras.Sequential([
        keras.Input((inputs,)),
        layers.PackedDense(12, num_members=M, first=True, activation="relu"),
        layers.PackedDense(12, num_members=M, activation="relu"),
        layers.PackedDense(classes, num_members=M, last=True),
        layers.PackedOutput(M)])


def _member_parts(model, m):
    """(layer, weight index, column slice) of every weight entry that belongs to member m."""
    parts = []
    for layer in model.layers[:-1]:
        block = slice(m * layer.member_width, (m + 1) * layer.member_width)
        parts += [(layer, 0, block), (layer, 1, block)]
    return parts


@pytest.mark.jax
def test_member_m_output_depends_on_member_m_weights_only():
    model = mlp()
    x = RNG.normal(size=(6, 4)).astype("float32")
    out = ops.convert_to_numpy(model(x))
    for m in range(M):
        saved = [layer.get_weights() for layer in model.layers[:-1]]
        for layer, index, block in _member_parts(model, m):
            weights = layer.get_weights()
            weights[index][..., block] += RNG.normal(size=weights[index][..., block].shape)
            layer.set_weights(weights)
        after = ops.convert_to_numpy(model(x))
        for layer, weights in zip(model.layers[:-1], saved):
            layer.set_weights(weights)
        for other in range(M):
            if other == m:
                assert np.abs(after[:, m] - out[:, m]).max() > 1e-2
            else:
                np.testing.assert_array_equal(after[:, other], out[:, other])


X, Y = checks.classification_data((4,))


class TestMlp(checks.TrainedClassifierChecks):
    build = staticmethod(mlp)
    num_members = M
    data = (X, Y)
    seed = 5

    def check_loaded(self, loaded):
        assert [layer.groups for layer in loaded.layers[:-1]] == [1, M, M]


@pytest.mark.jax
def test_mlp_trains_and_predicts_under_mixed_float16(mixed_float16):
    keras.utils.set_random_seed(5)
    checks.assert_trains_under_mixed_float16(mlp(), X, Y, M)

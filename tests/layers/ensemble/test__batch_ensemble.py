"""The BatchEnsemble base: argument checks, fast-weight initialisation, dtypes, sample multiple."""

import keras
import numpy as np
import pytest
from keras import ops

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers.ensemble._batch_ensemble import BatchEnsembleLayer
from tfp_bnn.predict.engine import sample_multiple

pytestmark = pytest.mark.jax

BE_LAYERS = [(layers.BatchEnsembleDense, {"units": 3}),
             (layers.BatchEnsembleConv2D, {"filters": 3, "kernel_size": 3})]


@pytest.mark.parametrize("cls, init", BE_LAYERS, ids=lambda v: getattr(v, "__name__", ""))
def test_bad_arguments_name_themselves(cls, init):
    good = {**init, "num_members": 2}
    cases = [
        ({"num_members": 0}, "`num_members` must be a positive int, got 0"),
        ({"num_members": 2.0}, "`num_members` must be a positive int, got 2.0"),
        ({"use_bias": "yes"}, "`use_bias` must be True or False"),
        ({"kernel_initializer": "nope"}, "`kernel_initializer` must be a Keras initializer"),
        ({"bias_initializer": 3}, "`bias_initializer` must be a Keras initializer"),
        ({"fast_weight_initializer": "nope"},
         "`fast_weight_initializer` must be a Keras initializer"),
        ({"kernel_regularizer": "nope"}, "`kernel_regularizer` must be a Keras regularizer"),
        ({"fast_weight_regularizer": "nope"},
         "`fast_weight_regularizer` must be a Keras regularizer"),
        ({"activity_regularizer": "nope"}, "`activity_regularizer` must be a Keras regularizer"),
        ({"bias_constraint": "nope"}, "`bias_constraint` must be a Keras constraint"),
        ({"fast_weight_constraint": "nope"},
         "`fast_weight_constraint` must be a Keras constraint"),
        ({next(iter(init)): 0}, f"`{next(iter(init))}` must be a positive int, got 0"),
    ]
    checks.assert_bad_arguments_name_themselves(cls, good, cases)
    assert isinstance(cls(**good), BatchEnsembleLayer)


def test_conv_arguments_are_checked_as_conv2d_checks_them():
    with pytest.raises(ValueError, match="`padding` must be one of"):
        layers.BatchEnsembleConv2D(3, 3, 2, padding="full")
    with pytest.raises(ValueError, match="`kernel_size` must be a positive int or a tuple of 2"):
        layers.BatchEnsembleConv2D(3, (3, 3, 3), 2)
    assert "groups" not in layers.BatchEnsembleConv2D(3, 3, 2).get_config()


def test_fast_weights_start_at_n_1_half_and_r_differs_from_s():
    layer = layers.BatchEnsembleDense(400, num_members=10)
    layer.build((None, 400))
    r = ops.convert_to_numpy(layer.input_fast_weight)
    s = ops.convert_to_numpy(layer.output_fast_weight)
    assert r.shape == s.shape == (10, 400)
    for values in (r, s):
        # 4000 draws of N(1, 0.5^2): mean within 5 standard errors, stddev within 5 of its
        # standard errors (0.5 / sqrt(2 n)).
        n = values.size
        assert abs(values.mean() - 1.0) < 5 * 0.5 / np.sqrt(n)
        assert abs(values.std() - 0.5) < 5 * 0.5 / np.sqrt(2 * n)
    assert np.abs(r - s).max() > 0.1
    # A seeded initializer gives r and s two different seeds, reproducibly.
    seeded = [layers.BatchEnsembleDense(
        3, num_members=2, fast_weight_initializer=keras.initializers.RandomNormal(seed=4))
        for _ in range(2)]
    for layer in seeded:
        layer.build((None, 3))
    first, twin = ([ops.convert_to_numpy(w) for w in (l.input_fast_weight, l.output_fast_weight)]
                   for l in seeded)
    np.testing.assert_array_equal(first[0], twin[0])
    np.testing.assert_array_equal(first[1], twin[1])
    assert not np.array_equal(first[0], first[1])


@pytest.mark.parametrize("cls, init", BE_LAYERS, ids=lambda v: getattr(v, "__name__", ""))
def test_declares_its_members_as_the_sample_multiple(cls, init):
    model = keras.Sequential([
        keras.Input((6, 6, 2) if "filters" in init else (4,)),
        layers.EnsembleTile(3), cls(**init, num_members=3)])
    assert sample_multiple(model) == 3
    assert cls(**init, num_members=5).samples_multiple == 5


@pytest.mark.parametrize("cls, init", BE_LAYERS, ids=lambda v: getattr(v, "__name__", ""))
def test_mixed_precision_computes_in_float16_with_float32_weights(cls, init):
    shape = (4, 6, 6, 2) if "filters" in init else (4, 5)
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    checks.assert_mixed_precision_matches_float32(
        cls(**init, num_members=2, dtype="mixed_float16"), cls(**init, num_members=2), x)

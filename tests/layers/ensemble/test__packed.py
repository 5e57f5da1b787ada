"""The Packed-Ensembles base: widths and groups, argument checks, input checks, dtypes."""

import numpy as np
import pytest

from tests.layers.ensemble import checks
from tfp_bnn import layers
from tfp_bnn.layers.ensemble._packed import PackedLayer
from tfp_bnn.layers.ensemble._packed import packed_widths

pytestmark = pytest.mark.jax

PACKED = [(layers.PackedDense, {"units": 4}),
          (layers.PackedConv2D, {"filters": 4, "kernel_size": 3})]


@pytest.mark.parametrize("first, last, gamma, expected", [
    (False, False, 1, (4, 32)),    # inner: alpha * width over M groups
    (True, False, 1, (1, 32)),     # first: one group, the shared input
    (False, False, 2, (8, 32)),    # gamma groups per member
    (False, True, 1, (4, 64)),     # last: M * width
    (True, True, 1, (1, 64)),      # first and last: one layer, M heads
])
def test_widths_and_groups(first, last, gamma, expected):
    assert packed_widths("units", 16, 4, 2, gamma, first, last) == expected


def test_fractional_alpha_gives_integer_widths_or_names_itself():
    assert packed_widths("units", 8, 2, 1.5, 1, False, False) == (2, 12)
    with pytest.raises(ValueError, match=r"`alpha` \* `units` must be an integer .* got 1\.5 \* "
                                         r"5 = 7\.5"):
        packed_widths("units", 5, 2, 1.5, 1, False, False)
    with pytest.raises(ValueError, match=r"`alpha` \* `filters` \(10\) must be divisible by "
                                         r"`num_members` \* `gamma` \(4\)"):
        packed_widths("filters", 5, 4, 2, 1, False, False)
    with pytest.raises(ValueError, match=r"`units` \(3\) must be divisible by `gamma` \(2\) in a "
                                         "last layer"):
        packed_widths("units", 3, 2, 2, 2, False, True)


@pytest.mark.parametrize("cls, init", PACKED, ids=lambda v: getattr(v, "__name__", ""))
def test_bad_arguments_name_themselves(cls, init):
    good = {**init, "num_members": 2}
    width = next(iter(init))
    cases = [
        ({"num_members": 0}, "`num_members` must be a positive int, got 0"),
        ({width: -4}, f"`{width}` must be a positive int, got -4"),
        ({"alpha": 0}, "`alpha` must be a finite number > 0, got 0"),
        ({"alpha": "2"}, "`alpha` must be a finite number > 0"),
        ({"gamma": 1.5}, "`gamma` must be a positive int, got 1.5"),
        ({"first": 1}, "`first` must be True or False, got 1"),
        ({"last": "no"}, "`last` must be True or False"),
        ({"use_bias": None}, "`use_bias` must be True or False"),
        ({"kernel_initializer": "nope"}, "`kernel_initializer` must be a Keras initializer"),
        ({"bias_initializer": "nope"}, "`bias_initializer` must be a Keras initializer"),
        ({"kernel_regularizer": "nope"}, "`kernel_regularizer` must be a Keras regularizer"),
        ({"bias_regularizer": "nope"}, "`bias_regularizer` must be a Keras regularizer"),
        ({"activity_regularizer": "nope"}, "`activity_regularizer` must be a Keras regularizer"),
        ({"kernel_constraint": "nope"}, "`kernel_constraint` must be a Keras constraint"),
        ({"bias_constraint": "nope"}, "`bias_constraint` must be a Keras constraint"),
        ({"gamma": 3}, r"must be divisible by `num_members` \* `gamma` \(6\)"),
    ]
    checks.assert_bad_arguments_name_themselves(cls, good, cases)
    layer = cls(**good)
    assert isinstance(layer, PackedLayer)
    assert (layer.groups, layer.output_width, layer.member_width) == (2, 8, 4)


def test_conv_arguments_are_checked_as_conv2d_checks_them():
    with pytest.raises(ValueError, match="`strides` must be a positive int or a tuple of 2"):
        layers.PackedConv2D(4, 3, 2, strides=(1, 0))
    with pytest.raises(ValueError, match="`data_format` must be one of"):
        layers.PackedConv2D(4, 3, 2, data_format="NHWC")


@pytest.mark.parametrize("cls, init, shape", [
    (layers.PackedDense, {"units": 4}, (2, 5)),
    (layers.PackedConv2D, {"filters": 4, "kernel_size": 3}, (2, 6, 6, 5))])
def test_inputs_the_groups_do_not_divide_are_refused_with_the_fix(cls, init, shape):
    with pytest.raises(ValueError, match=f"{cls.__name__} has 2 groups .* its input's 5 channels "
                                         "must be divisible by 2.*first=True"):
        cls(**init, num_members=2)(np.zeros(shape, "float32"))
    # The first layer has one group: any width.
    assert cls(**init, num_members=2, first=True)(np.zeros(shape, "float32")).shape[-1] == 8


@pytest.mark.parametrize("cls, init, shape", [
    (layers.PackedDense, {"units": 4}, (3, 6)),
    (layers.PackedConv2D, {"filters": 4, "kernel_size": 3}, (3, 6, 6, 4))])
def test_mixed_precision_computes_in_float16_with_float32_weights(cls, init, shape):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    half = cls(**init, num_members=2, dtype="mixed_float16", bias_initializer="random_normal")
    checks.assert_mixed_precision_matches_float32(half, cls(**init, num_members=2), x)

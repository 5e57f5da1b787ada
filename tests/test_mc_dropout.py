"""Gal's weight decay <-> model precision relation for MC dropout networks."""

import itertools
import math

import pytest

from tfp_bnn.mc_dropout import model_precision
from tfp_bnn.mc_dropout import weight_decay

pytestmark = pytest.mark.jax

# Each side is 5 floating-point operations, each with relative error <= 2**-53;
# a round trip is 10. 64 * 2**-53 ~ 7e-15 leaves room and still catches any
# error in the formula (which would be a factor, not a rounding).
_REL = 64 * 2.0**-53

# (length_scale, dropout_rate, num_examples, precision, weight_decay), by hand:
#   l = 1e-2, p = 0.05, N = 1000, tau = 10:
#       l^2 (1 - p) = 1e-4 * 0.95 = 9.5e-5;  2 N tau = 2 * 1000 * 10 = 2e4;
#       lambda = 9.5e-5 / 2e4 = 4.75e-9        (Gal's UCI set-up)
#   l = 2, p = 0.5, N = 100, tau = 0.25:
#       4 * 0.5 = 2;  2 * 100 * 0.25 = 50;  lambda = 2 / 50 = 0.04
#   l = 1, p = 0 (no dropout), N = 1, tau = 1:
#       1 * 1 = 1;  2 * 1 * 1 = 2;  lambda = 0.5
#   l = 3, p = 0.9, N = 5, tau = 0.1:
#       9 * 0.1 = 0.9;  2 * 5 * 0.1 = 1;  lambda = 0.9
_HAND = [
    (1e-2, 0.05, 1000, 10.0, 4.75e-9),
    (2.0, 0.5, 100, 0.25, 0.04),
    (1.0, 0.0, 1, 1.0, 0.5),
    (3, 0.9, 5, 0.1, 0.9),
]


@pytest.mark.parametrize("l, p, n, tau, lam", _HAND)
def test_hand_computed_values(l, p, n, tau, lam):
    assert weight_decay(l, p, n, tau) == pytest.approx(lam, rel=_REL)
    assert model_precision(l, p, n, lam) == pytest.approx(tau, rel=_REL)


def test_keyword_arguments_as_documented():
    lam = weight_decay(length_scale=1e-2, dropout_rate=0.05, num_examples=1000, precision=10.0)
    assert lam == pytest.approx(4.75e-9, rel=_REL)
    tau = model_precision(length_scale=1e-2, dropout_rate=0.05, num_examples=1000,
                          weight_decay=lam)
    assert tau == pytest.approx(10.0, rel=_REL)
    assert isinstance(lam, float) and isinstance(tau, float)


def test_round_trip_on_a_grid():
    grid = itertools.product([1e-3, 0.1, 1.0, 7.5], [0.0, 0.1, 0.5, 0.95],
                             [1, 37, 10_000], [1e-3, 1.0, 250.0])
    for l, p, n, tau in grid:
        lam = weight_decay(l, p, n, tau)
        assert lam > 0
        assert model_precision(l, p, n, lam) == pytest.approx(tau, rel=_REL), (l, p, n, tau)


def test_monotone_in_each_argument():
    sizes = [10, 100, 1000, 10_000]
    decays = [weight_decay(0.5, 0.1, n, 2.0) for n in sizes]
    assert all(a > b for a, b in zip(decays, decays[1:]))  # more data, smaller decay
    # lambda is linear in 1/N: ten times the data, a tenth of the decay.
    for a, b in zip(decays, decays[1:]):
        assert b == pytest.approx(a / 10, rel=_REL)
    rates = [0.0, 0.2, 0.5, 0.9]
    decays = [weight_decay(0.5, p, 100, 2.0) for p in rates]
    assert all(a > b for a, b in zip(decays, decays[1:]))  # more dropout, smaller decay
    precisions = [0.1, 1.0, 10.0]
    decays = [weight_decay(0.5, 0.1, 100, t) for t in precisions]
    assert all(a > b for a, b in zip(decays, decays[1:]))
    scales = [0.01, 0.1, 1.0]
    decays = [weight_decay(s, 0.1, 100, 2.0) for s in scales]
    assert all(a < b for a, b in zip(decays, decays[1:]))


_GOOD = {"length_scale": 0.1, "dropout_rate": 0.1, "num_examples": 100}
_BAD_SHARED = [
    ("length_scale", 0.0), ("length_scale", -1.0), ("length_scale", math.nan),
    ("length_scale", math.inf), ("length_scale", "1"),
    ("dropout_rate", -0.1), ("dropout_rate", 1.0), ("dropout_rate", 1.5),
    ("dropout_rate", math.nan),
    ("num_examples", 0), ("num_examples", -5), ("num_examples", 2.5), ("num_examples", True),
]


@pytest.mark.parametrize("name, value", _BAD_SHARED)
@pytest.mark.parametrize("function, last", [(weight_decay, "precision"),
                                            (model_precision, "weight_decay")])
def test_bad_shared_arguments_raise_naming_them(function, last, name, value):
    kwargs = dict(_GOOD, **{last: 1.0})
    kwargs[name] = value
    with pytest.raises(ValueError, match=f"`{name}`"):
        function(**kwargs)


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, True])
def test_bad_precision_raises(value):
    with pytest.raises(ValueError, match="`precision`"):
        weight_decay(precision=value, **_GOOD)


@pytest.mark.parametrize("value", [0.0, -1e-4, math.nan, math.inf, True])
def test_bad_weight_decay_raises(value):
    with pytest.raises(ValueError, match="`weight_decay`"):
        model_precision(weight_decay=value, **_GOOD)

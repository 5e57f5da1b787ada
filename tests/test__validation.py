"""tfp_bnn._validation: the one copy of the argument checks."""

import math
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfp_bnn import _validation as check


def _refused(fragment):
    return pytest.raises(ValueError, match=fragment)


# integer ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [3, np.int32(3), np.int64(3), np.uint8(3)])
def test_integer_accepts_python_and_numpy_ints(value):
    result = check.integer("units", value)
    assert result == 3 and type(result) is int


@pytest.mark.parametrize("value", [True, False, np.bool_(True), 3.0, np.float32(3.0), "3", None,
                                   [3], 2.5])
def test_integer_refuses_non_ints_and_names_the_argument(value):
    with _refused(r"^`units` must be a positive int, got " + re.escape(repr(value)) + r"\.$"):
        check.integer("units", value)


def test_integer_accepts_scalar_integer_tensors_as_tfp_does():
    for value in (tf.constant(3), tf.constant(3, tf.int64), np.array(3)):
        result = check.integer("units", value)
        assert result == 3 and type(result) is int


@pytest.mark.parametrize("value", [tf.constant(3.0), tf.constant(True), tf.constant(-1),
                                   tf.constant([3])])
def test_integer_refuses_other_tensors_in_one_line(value):
    with _refused(r"^`units` must be a positive int, got <tf.Tensor: [^\n]*>\.$"):
        check.integer("units", value)


def test_integer_none_passes_only_when_allowed():
    assert check.integer("units", None, allow_none=True) is None
    assert check.integer("units", 4, allow_none=True) == 4
    with _refused("`units` must be a positive int, got None"):
        check.integer("units", None)


@pytest.mark.parametrize("minimum, maximum, good, bad, kind", [
    (1, None, 1, 0, "a positive int"),
    (0, None, 0, -1, "a non-negative int"),
    (2, None, 2, 1, "an int >= 2"),
    (1, 5, 5, 6, "an int in 1..5"),
    (1, 5, 1, 0, "an int in 1..5"),
    (0, 10_000, 10_000, 10_001, "an int in 0..10,000"),
    (None, None, -7, 1.5, "an int"),
])
def test_integer_bounds_are_closed(minimum, maximum, good, bad, kind):
    assert check.integer("n", good, minimum=minimum, maximum=maximum) == good
    with _refused(rf"^`n` must be {re.escape(kind)}, got {re.escape(repr(bad))}\.$"):
        check.integer("n", bad, minimum=minimum, maximum=maximum)


def test_integer_maximum_without_minimum_says_at_most():
    assert check.integer("n", -50, minimum=None, maximum=3) == -50
    with _refused(r"^`n` must be at most 3, got 4\.$"):
        check.integer("n", 4, minimum=None, maximum=3)


# integers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    (4, (4,)), (np.int64(4), (4,)), ([1, 2], (1, 2)), ((3,), (3,)), (np.array([5, 6]), (5, 6)),
    (range(1, 3), (1, 2)),
])
def test_integers_accepts_a_scalar_or_a_sequence(values, expected):
    result = check.integers("units", values)
    assert result == expected and all(type(v) is int for v in result)


def test_integers_names_the_bad_element():
    with _refused(r"^`units\[1\]` must be a positive int, got 0\.$"):
        check.integers("units", [2, 0])
    with _refused(r"^`units\[0\]` must be a non-negative int, got -1\.$"):
        check.integers("units", -1, minimum=0)
    with _refused(r"`units\[0\]` must be a positive int, got 'ab'"):
        check.integers("units", "ab")


def test_integers_refuses_empty():
    with _refused(r"^`units` must hold at least one int, got \(\)\.$"):
        check.integers("units", [])


# seed ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, 42, np.int64(7)])
def test_seed_accepts_non_negative_ints(value):
    assert check.seed(value) == int(value)


@pytest.mark.parametrize("value", [-1, 1.0, True, None, "0"])
def test_seed_refuses_and_names_the_argument(value):
    with _refused(rf"^`seed` must be a non-negative int, got {re.escape(repr(value))}\.$"):
        check.seed(value)
    with _refused(r"^`split_seed` must be a non-negative int"):
        check.seed(value, name="split_seed")


# number / positive --------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0.5, 1, np.float32(0.5), np.float64(0.25), np.int64(0)])
def test_number_accepts_real_numbers(value):
    result = check.number("rate", value)
    assert result == float(value) and type(result) is float


@pytest.mark.parametrize("value", [True, "0.5", None, [0.5], 1j, math.nan, math.inf, -math.inf])
def test_number_refuses_non_finite_and_non_numbers(value):
    with _refused(rf"^`rate` must be a finite number, got {re.escape(repr(value))}\.$"):
        check.number("rate", value)


def test_number_none_passes_only_when_allowed():
    assert check.number("rate", None, allow_none=True) is None
    assert check.positive("rate", None, allow_none=True) is None


@pytest.mark.parametrize("kwargs, inside, outside, text", [
    (dict(low=0, high=1), [0, 1, 0.5], [-0.01, 1.01], "a number in [0, 1]"),
    (dict(low=0, high=1, low_open=True, high_open=True), [0.5, 1e-9], [0, 1],
     "a number in (0, 1)"),
    (dict(low=0, high=1, high_open=True), [0, 0.99], [1], "a number in [0, 1)"),
    (dict(low=0.0, high=1.0, low_open=True), [1.0], [0.0], "a number in (0, 1]"),
    (dict(low=0.5, high=2.5), [0.5, 2.5], [0.49], "a number in [0.5, 2.5]"),
    (dict(low=0), [0, 1e9], [-1e-9], "a finite number >= 0"),
    (dict(low=0, low_open=True), [1e-300], [0], "a finite number > 0"),
    (dict(high=2), [2, -5], [2.5], "a finite number <= 2"),
    (dict(high=2, high_open=True), [1.99], [2], "a finite number < 2"),
])
def test_number_bounds_open_and_closed(kwargs, inside, outside, text):
    for value in inside:
        assert check.number("level", value, **kwargs) == value
    for value in outside:
        with _refused(rf"^`level` must be {re.escape(text)}, got {re.escape(repr(value))}\.$"):
            check.number("level", value, **kwargs)


@pytest.mark.parametrize("value", [1e-12, 3, np.float32(2.0)])
def test_positive_accepts(value):
    assert check.positive("prior_scale", value) == float(value)


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, "1", True])
def test_positive_refuses(value):
    with _refused(rf"^`prior_scale` must be a finite number > 0, got {re.escape(repr(value))}"):
        check.positive("prior_scale", value)


# one_of -------------------------------------------------------------------------------------

def test_one_of_returns_the_value():
    assert check.one_of("mode", "full", ("diagonal", "full")) == "full"
    assert check.one_of("mode", 2, {1, 2}) == 2


def test_one_of_lists_the_options_in_order():
    with _refused(r"^`mode` must be one of \['diagonal', 'full'\], got 'diag'\.$"):
        check.one_of("mode", "diag", ("diagonal", "full"))
    with _refused(r"^`mode` must be one of \['a', 'b', 'c'\], got 'z'\.$"):
        check.one_of("mode", "z", {"c", "a", "b"})


@pytest.mark.parametrize("options", [{"a", "b"}, frozenset({"a"}), {"a": 1}, ("a", "b")])
def test_one_of_refuses_unhashable_values_without_type_error(options):
    with _refused(r"^`method` must be one of .*, got \['a'\]\.$"):
        check.one_of("method", ["a"], options)
    with _refused(r"^`method` must be one of .*, got \{\}\.$"):
        check.one_of("method", {}, options)


# boolean ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_boolean_accepts_bools(value):
    result = check.boolean("training", value)
    assert result is bool(value)


@pytest.mark.parametrize("value", [0, 1, "True", None, 1.0, np.int64(1)])
def test_boolean_refuses_everything_else(value):
    with _refused(rf"^`training` must be True or False, got {re.escape(repr(value))}\.$"):
        check.boolean("training", value)


@pytest.mark.parametrize("values", [["a", "c"], ("b",)])
def test_subset_keeps_distinct_members_in_order(values):
    assert check.subset("names", values, ("a", "b", "c")) == list(values)


@pytest.mark.parametrize("values, message", [
    ([], r"`names` must be some of \['a', 'b'\], got \[\]"),
    (["z"], r"`names` must be some of \['a', 'b'\], got \['z'\]"),
    ("ab", r"`names` must be a list of values from"),
    (["a", "b", "a"], r"`names` lists a twice"),
])
def test_subset_refuses_unknown_empty_repeated_or_a_string(values, message):
    with pytest.raises(ValueError, match=message):
        check.subset("names", values, ("a", "b"))


# initializer --------------------------------------------------------------------------------

def test_initializer_resolves_names_and_configs_and_passes_none_when_allowed():
    import keras  # noqa: PLC0415

    assert isinstance(check.initializer("init", "zeros"), keras.initializers.Zeros)
    config = keras.initializers.serialize(keras.initializers.Constant(2.0))
    assert check.initializer("init", config).value == 2.0
    assert check.initializer("init", None, allow_none=True) is None


@pytest.mark.parametrize("value", ["nope", None, 3])
def test_initializer_refuses_what_keras_cannot_resolve(value):
    with _refused(r"^`init` must be a Keras initializer \(name, instance or config\), got "):
        check.initializer("init", value)


# shape and size (distribution layers' event_shape, event_size, num_components) ---------------

@pytest.mark.parametrize("value, expected", [
    (2, (2,)), (np.int64(2), (2,)), ((2, 3), (2, 3)), ([2], (2,)), ((), ()),
    (tf.constant([2, 3]), (2, 3)), (tf.constant(2), (2,)), (np.array([4]), (4,)),
    (tf.TensorShape([2]), (2,)),
])
def test_shape_accepts_ints_sequences_and_int_tensors(value, expected):
    result = check.shape("event_shape", value)
    assert result == expected and all(type(v) is int for v in result)


@pytest.mark.parametrize("value", [0, -2, True, 2.0, "2", [2, 0], [True], tf.constant([2.0]),
                                   tf.constant(True), tf.TensorShape([None])])
def test_shape_refuses_the_whole_shape_in_one_line(value):
    with _refused(r"^`event_shape` must be a positive int or a tuple of positive ints, "
                  r"got [^\n]*\.$"):
        check.shape("event_shape", value)


@pytest.mark.parametrize("value", [3, np.int32(3), [3], (3,), tf.constant(3), tf.constant([3])])
def test_size_accepts_an_int_or_a_one_element_shape(value):
    result = check.size("event_size", value)
    assert result == 3 and type(result) is int


@pytest.mark.parametrize("value", [0, [2, 3], (), True, 3.0, tf.constant(3.0), tf.constant(True)])
def test_size_refuses_in_one_line(value):
    with _refused(r"^`event_size` must be a positive int, got [^\n]*\.$"):
        check.size("event_size", value)


def test_size_minimum_is_in_the_message():
    with _refused(r"^`event_size` must be an int >= 2, got 1\.$"):
        check.size("event_size", 1, minimum=2)


def test_integers_takes_a_scalar_tensor_as_one_value():
    assert check.integers("kernel_size", tf.constant(3)) == (3,)


# axes -----------------------------------------------------------------------------------------

def test_axes_passes_an_axes_and_none():
    figure_module = pytest.importorskip("matplotlib.figure")
    ax = figure_module.Figure().add_subplot()
    assert check.axes("ax", ax) is ax
    assert check.axes("ax", None) is None


@pytest.mark.parametrize("value, shown", [("ax", "str"), (np.zeros(2), "ndarray"), (3, "int")])
def test_axes_refuses_in_one_line_naming_the_type(value, shown):
    with _refused(rf"^`ax` must be a matplotlib Axes \(e\.g\. `figure\.add_subplot\(\)`\) or "
                  rf"None, got {shown}\.$"):
        check.axes("ax", value)


def test_axes_refuses_a_figure_for_its_axes():
    figure_module = pytest.importorskip("matplotlib.figure")
    with _refused(r"^`panel` must be a matplotlib Axes .* got Figure\.$"):
        check.axes("panel", figure_module.Figure())


def test_axes_without_matplotlib_refuses_any_value(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.axes", None)
    with _refused(r"^`ax` must be a matplotlib Axes"):
        check.axes("ax", object())
    assert check.axes("ax", None) is None

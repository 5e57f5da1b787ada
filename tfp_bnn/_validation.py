"""The one copy of tfp_bnn's argument checks (Keras keeps its own in `argument_validation`).

Every check takes the argument's name first, returns the value converted to a plain Python
type, and raises one `ValueError` that names the argument, says what it must be and shows what
it got. The library, the zoo and the CLI call these; no module keeps a private copy.

Example:
>>> from tfp_bnn import _validation as check
>>> check.integer("units", 8)
8
>>> check.number("rate", 0.1, low=0.0, high=1.0, high_open=True)
0.1
>>> check.integer("units", 0)
Traceback (most recent call last):
...
ValueError: `units` must be a positive int, got 0.
"""

import math
import numbers
import operator

import numpy as np


def _int_kind(minimum, maximum):
    if maximum is not None and minimum is not None:
        return f"an int in {minimum}..{maximum:,}"
    if minimum == 1:
        return "a positive int"
    if minimum == 0:
        return "a non-negative int"
    return "an int" if minimum is None else f"an int >= {minimum}"


def integer(name, value, minimum=1, maximum=None, allow_none=False):
    """`value` as a Python int in [minimum, maximum], or ValueError naming `name`.

    Accepts Python and NumPy integers and scalar integer tensors (anything with `__index__`,
    as TFP's layers take `tf.constant(3)`), never a bool or a float. `None` passes through
    when `allow_none`.
    """
    if value is None and allow_none:
        return None
    kind = _int_kind(minimum, maximum)
    if isinstance(value, bool):
        raise ValueError(f"`{name}` must be {kind}, got {value!r}.")
    try:
        result = operator.index(value)
    except (TypeError, AttributeError):  # a float or bool tensor's __index__ raises the latter
        raise ValueError(f"`{name}` must be {kind}, got {value!r}.") from None
    if minimum is not None and result < minimum:
        raise ValueError(f"`{name}` must be {kind}, got {value!r}.")
    if maximum is not None and result > maximum:
        if minimum is not None:
            raise ValueError(f"`{name}` must be {kind}, got {value!r}.")
        raise ValueError(f"`{name}` must be at most {maximum:,}, got {value!r}.")
    return int(result)


def is_scalar(value):
    """True for one value: not iterable, a string, or a 0-d array or tensor."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return True
    return getattr(value, "ndim", None) == 0


def integers(name, values, minimum=1):
    """`values` (an int or a sequence of ints) as a tuple of ints >= minimum."""
    if is_scalar(values):
        values = (values,)
    values = tuple(values)
    if not values:
        raise ValueError(f"`{name}` must hold at least one int, got ().")
    return tuple(integer(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(values))


def shape(name, value):
    """`value` (a positive int or a sequence of them: tuple, list, 1-d array or int tensor) as
    a tuple of Python ints; () stays (), a scalar n is (n,). One message for the whole shape.
    """
    values = (value,) if is_scalar(value) else value
    try:
        return tuple(integer(name, v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a positive int or a tuple of positive ints, "
                         f"got {value!r}.") from None


def size(name, value, minimum=1):
    """`value` (an int >= minimum, or a shape of one such int: [3], tf.constant([3])) as an int."""
    values = (value,) if is_scalar(value) else value
    try:
        (result,) = (integer(name, v, minimum=minimum) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {_int_kind(minimum, None)}, got {value!r}.") from None
    return result


def seed(value, name="seed", allow_none=False):
    """A seed as a Python int >= 0 (what `np.random.default_rng` and Keras accept)."""
    return integer(name, value, minimum=0, allow_none=allow_none)


def _bound_text(low, high, low_open, high_open):
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"a number in {left}{low:g}, {high:g}{right}"
    if low is not None:
        return f"a finite number {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"a finite number {'<' if high_open else '<='} {high:g}"
    return "a finite number"


def number(name, value, low=None, high=None, low_open=False, high_open=False, allow_none=False):
    """`value` as a finite Python float within the bounds, or ValueError naming `name`.

    `low_open` / `high_open` make the bound strict: `number("rate", p, 0, 1, high_open=True)`
    is p in [0, 1).
    """
    if value is None and allow_none:
        return None
    text = _bound_text(low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"`{name}` must be {text}, got {value!r}.")
    result = float(value)
    ok = math.isfinite(result)
    if ok and low is not None:
        ok = result > low if low_open else result >= low
    if ok and high is not None:
        ok = result < high if high_open else result <= high
    if not ok:
        raise ValueError(f"`{name}` must be {text}, got {value!r}.")
    return result


def positive(name, value, allow_none=False):
    """A finite float > 0."""
    return number(name, value, low=0.0, low_open=True, allow_none=allow_none)


def one_of(name, value, options):
    """`value` if it is among `options`, else ValueError listing them."""
    try:
        found = value in options
    except TypeError:  # an unhashable value against a set or dict
        found = False
    if not found:
        shown = sorted(options) if isinstance(options, (set, frozenset, dict)) else list(options)
        raise ValueError(f"`{name}` must be one of {shown}, got {value!r}.")
    return value


def boolean(name, value):
    """`value` if it is a bool (or a NumPy bool), else ValueError."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be True or False, got {value!r}.")
    return bool(value)


def subset(name, values, options):
    """`values` as a non-empty list of distinct members of `options`, else ValueError."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"`{name}` must be a list of values from {list(options)}, "
                         f"got {values!r}.")
    values = list(values)
    unknown = [value for value in values if value not in options]
    if not values or unknown:
        raise ValueError(f"`{name}` must be some of {list(options)}, got {values!r}.")
    repeated = sorted({str(value) for value in values if values.count(value) > 1})
    if repeated:
        raise ValueError(f"`{name}` lists {', '.join(repeated)} twice: {values!r}.")
    return values


def array(name, values):
    """`values` as a NumPy array, or ValueError naming `name` if its rows are ragged."""
    try:
        return np.asarray(values)
    except ValueError:
        raise ValueError(f"`{name}` is ragged: its rows do not all have the same length.") \
            from None


def vector(name, values, allow_empty=False):
    """`values` as a 1-D finite float64 array (numeric, non-empty unless `allow_empty`)."""
    values = array(name, values)
    if values.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {values.shape}.")
    if values.size == 0 and not allow_empty:
        raise ValueError(f"`{name}` is empty.")
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise ValueError(f"`{name}` must be numeric, got dtype {values.dtype}.")
    values = values.astype(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"`{name}` must be finite, got {float(values[bad][0])!r} at index "
                         f"{int(np.flatnonzero(bad)[0])}.")
    return values


def initializer(name, value, allow_none=False):
    """`value` (a Keras initializer's name, instance or config) as an initializer instance.

    `None` passes through when `allow_none`.
    """
    import keras  # noqa: PLC0415 - the other checks need no Keras

    if value is None and allow_none:
        return None
    try:
        result = keras.initializers.get(value)
    except (ValueError, TypeError):
        result = None
    if result is None:
        raise ValueError(f"`{name}` must be a Keras initializer (name, instance or config), "
                         f"got {value!r}.")
    return result


def _keras_object(kind, name, value):
    """`value` resolved by `keras.<kind>.get` (None passes through), or one ValueError."""
    import keras  # noqa: PLC0415 - the other checks need no Keras

    if value is None:
        return None
    try:
        result = getattr(keras, kind).get(value)
    except (ValueError, TypeError):
        result = None
    if result is None:
        raise ValueError(f"`{name}` must be a Keras {kind[:-1]} (name, instance or config) "
                         f"or None, got {value!r}.")
    return result


def constraint(name, value):
    """`value` (a Keras constraint's name, instance or config, or None) as a constraint."""
    return _keras_object("constraints", name, value)


def regularizer(name, value):
    """`value` (a Keras regularizer's name, instance or config, or None) as a regularizer."""
    return _keras_object("regularizers", name, value)


def axes(name, value):
    """`value` if it is a `matplotlib.axes.Axes` or None, else ValueError naming `name`.

    matplotlib is imported only to check a value that is not None (it is an optional
    dependency of the plot modules).
    """
    if value is None:
        return None
    try:
        from matplotlib.axes import Axes  # noqa: PLC0415 - optional, only the plots need it
    except ImportError:
        Axes = ()  # without matplotlib nothing is an Axes
    if not isinstance(value, Axes):
        raise ValueError(f"`{name}` must be a matplotlib Axes (e.g. `figure.add_subplot()`) "
                         f"or None, got {type(value).__name__}.")
    return value

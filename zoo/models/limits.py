"""How large a ready model may be, checked from its arguments before anything is allocated.

The builders of `zoo.models` call these; `zoo.run.flags` checks `--set`
values against the same limits, so a hostile size ends in one line before
TensorFlow allocates anything.
"""

# Widest layer (units, filters, heads, flow components) a ready model may
# have: a 65536 x 65536 float32 kernel alone is 16 GiB.
MAX_UNITS = 65_536
# Weights of a ready model, estimated from its arguments before anything is
# allocated: 5e7 weights with a mean and a scale each and Adam's two moments
# of both are 1.6 GB of float32.
MAX_PARAMETERS = 5 * 10**7
# Builder arguments that size a layer; every int in them is at most MAX_UNITS.
SIZE_ARGUMENTS = ("hidden_units", "filters", "width", "ff_dim", "num_heads", "num_components",
                  "flow_length")


def printable(text):
    """`text` (a name from the command line or a directory) as valid UTF-8 for display.

    Python keeps the bytes of a non-UTF-8 file name as lone surrogates
    (PEP 383), which neither a UTF-8 terminal, a JSON reader nor a plot's
    font can take; they are shown as `\\xff` escapes instead.
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value, limit=40):
    """`value` for a message (a string quoted), shortened: a hostile one must not flood it."""
    text = str(value)
    quoted = repr(text[:limit]) if isinstance(value, str) else text[:limit]
    return quoted if len(text) <= limit else f"{quoted}... ({len(text):,} characters)"


def check_sizes(name, value):
    """Raises ValueError if an int in `value` (an int or a sequence) exceeds MAX_UNITS."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    for item in values:
        if isinstance(item, int) and not isinstance(item, bool) and item > MAX_UNITS:
            raise ValueError(f"`{name}` must be at most {MAX_UNITS:,} per layer, got "
                             f"{shown(item)}.")


def check_parameter_count(model, count, what):
    """Raises ValueError if a model's estimated weight count exceeds MAX_PARAMETERS."""
    if count > MAX_PARAMETERS:
        raise ValueError(f"{model} with {what} would have about {count:.3g} weights; the "
                         f"limit is {MAX_PARAMETERS:.3g} (choose smaller layers).")

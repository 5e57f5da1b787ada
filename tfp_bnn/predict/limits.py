"""Limits on every size a prediction's caller controls, checked before any work.

`num_samples` (T), `batch_size`, `samples_per_call` and `max_rows` are
checked together by `plan` (once per prediction, through
`engine.prepare`); the [T, N, ...] results a front end keeps are checked
by `check_results` before the first model call (with the model's static
output size) and by `check_storage` on the first chunk (exact size).
Memory is bounded by half the machine's physical memory (`_memory.check_bytes`).
"""

import math

import numpy as np
from tfp_bnn import _tf

from tfp_bnn import _validation as check
from tfp_bnn._memory import check_bytes

DEFAULT_BATCH_SIZE = 1024
DEFAULT_MAX_ROWS = 16384
# The most tiled rows (samples_per_call * batch_size) one traced call takes:
# 2**22 rows of a 1,000-wide float32 hidden layer are already 16 GiB.
MAX_ROWS_PER_CALL = 2**22


# The most Monte Carlo samples one prediction takes: the standard error of a
# predictive mean falls as 1/sqrt(T), so beyond 10^6 a run only costs time.
MAX_NUM_SAMPLES = 10**6


def sample_chunks(num_samples, samples_per_call, multiple=1):
    """Balanced chunk sizes that add up to num_samples, none above samples_per_call.

    With `multiple` > 1 (a deep ensemble's M: see `plan`) every chunk is a
    multiple of it; `plan` has made num_samples and samples_per_call so.
    Yielded one at a time: memory O(1) however many calls there are.
    """
    units, per_call = num_samples // multiple, samples_per_call // multiple
    calls = -(-units // per_call)  # exact for ints of any size
    base, extra = divmod(units, calls)
    for index in range(calls):
        yield multiple * (base + 1 if index < extra else base)


def check_draws(layers, samples_per_call, name="samples_per_call"):
    """Raises ValueError if `samples_per_call` weight samples of `layers` cannot fit in memory.

    One traced call holds a sample of every weight of the model's variational
    `layers` per sample; their variables (means and scales alike, so an upper
    bound within a factor of about 2) give the bytes of one sample.
    """
    per_sample = sum(math.prod(int(d) for d in weight.shape) * np.dtype(weight.dtype).itemsize
                     for layer in layers for weight in layer.weights)
    check_bytes(samples_per_call * per_sample,
                f"{samples_per_call:,} weight samples per call of the model's variational "
                "layers", f"pass a smaller `{name}`")


def check_storage(shape, dtype, what):
    """Raises ValueError if an array of `shape` would take over half the machine's memory.

    Called before a prediction allocates its [T, N, ...] results, so that a
    huge `num_samples` is refused with a message rather than by the kernel's
    out-of-memory killer.
    """
    shape = tuple(int(d) for d in shape)
    check_bytes(math.prod(shape) * np.dtype(dtype).itemsize, f"{what} of shape {shape}",
                "use a smaller `num_samples` or fewer inputs")


def static_output_size(model):
    """Values per example of the model's single output if its shape is static, else 1.

    A lower bound for checking the storage of T * N results before any call.
    """
    try:
        outputs = list(model.outputs or [])
    except (AttributeError, ValueError, TypeError):  # subclassed: unknown until called
        return 1
    if len(outputs) != 1:
        return 1
    dims = tuple(outputs[0].shape)[1:]
    if any(d is None for d in dims):
        return 1
    return max(1, math.prod(int(d) for d in dims))


def check_results(model, num_samples, count, what, copies=1, dtype=np.float64, per_example=None):
    """Refuses, before the first model call, `copies` [T, N, D] results that cannot fit.

    D is `per_example` or the model's static output size (1 when unknown: a
    lower bound; the exact size is checked again on the first chunk). `num_samples`
    comes checked from `plan`.
    """
    size = static_output_size(model) if per_example is None else max(1, int(per_example))
    check_storage((copies, num_samples, count, size), dtype, what)


def check_multiple(name, value, multiple):
    """Returns `value` (a checked int) if it is a multiple of `multiple`, else raises.

    A model whose traced calls must see a multiple of M samples (a deep
    ensemble of M members gives sample s to member s mod M, so only a
    multiple of M weighs the members equally) declares it: see `plan`.
    """
    if value % multiple:
        raise ValueError(f"`{name}` must be a multiple of {multiple} for this model (a deep "
                         f"ensemble of {multiple} members: sample s is member s mod "
                         f"{multiple}), got {value}.")
    return value


def plan(num_samples, leaves, count, batch_size=None, samples_per_call=None,
         max_rows=DEFAULT_MAX_ROWS, multiple=1):
    """Checks every size the caller controls; returns (T, batch_size, samples_per_call).

    Each traced call tiles `samples_per_call` copies of `batch_size` inputs:
    their product is bounded by `MAX_ROWS_PER_CALL` and the tiled inputs must
    fit in half the machine's memory, checked here before any allocation.
    With `multiple` > 1 (`engine.sample_multiple`), T and samples_per_call
    must be multiples of it, and the default samples_per_call is rounded down
    to one (at least `multiple`).
    """
    num_samples = check.integer("num_samples", num_samples, maximum=MAX_NUM_SAMPLES)
    batch_size = check.integer("batch_size", batch_size, allow_none=True)
    samples_per_call = check.integer("samples_per_call", samples_per_call, allow_none=True)
    max_rows = check.integer("max_rows", max_rows, maximum=MAX_ROWS_PER_CALL)
    check_multiple("num_samples", num_samples, multiple)
    batch_size = min(count, batch_size or DEFAULT_BATCH_SIZE)
    if samples_per_call is None:
        samples_per_call = max(multiple, max_rows // batch_size // multiple * multiple)
    check_multiple("samples_per_call", samples_per_call, multiple)
    samples_per_call = min(num_samples, samples_per_call)
    rows = samples_per_call * batch_size
    if rows > MAX_ROWS_PER_CALL:
        raise ValueError(
            f"`samples_per_call` * `batch_size` = {samples_per_call:,} * {batch_size:,} = "
            f"{rows:,} tiled rows per call, over the limit of {MAX_ROWS_PER_CALL:,}; pass a "
            "smaller `samples_per_call` or `batch_size`.")
    row_bytes = sum(math.prod(int(d) for d in leaf.shape[1:]) * leaf.dtype.size
                    if _tf.is_tensor(leaf) else leaf[:1].nbytes for leaf in leaves)
    check_bytes(rows * row_bytes, f"The inputs tiled {samples_per_call:,} times per call "
                f"({rows:,} rows)", "pass a smaller `samples_per_call` or `batch_size`")
    return num_samples, batch_size, samples_per_call


def count_calls(num_samples, count, batch_size, samples_per_call):
    """How many traced calls `engine.chunks` makes: sample chunks times input chunks."""
    return -(-num_samples // samples_per_call) * -(-count // batch_size)

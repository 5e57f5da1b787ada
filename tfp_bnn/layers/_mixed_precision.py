"""Reading float32 variables as float32 inside a mixed-precision layer's call."""

import contextlib


def float32_variables():
    """Reads variables at their own dtype inside this block.

    Keras 3 enters an autocast scope for every layer whose compute and
    variable dtypes differ (mixed precision), even with `autocast=False`, so
    reading a variable inside `call` would give float16 parameters and a
    float16 KL. The layers cast what enters the forward pass themselves.
    """
    try:
        from keras.src.backend import AutocastScope  # noqa: PLC0415
    except ImportError:  # pragma: no cover - Keras moved its private scope
        return contextlib.nullcontext()
    return AutocastScope(None)

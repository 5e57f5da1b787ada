"""Reading float32 variables as float32 inside a mixed-precision layer's call."""

from tfp_bnn import _keras_internals


def float32_variables():
    """Reads variables at their own dtype inside this block.

    Keras 3 enters an autocast scope for every layer whose compute and
    variable dtypes differ (mixed precision), even with `autocast=False`, so
    reading a variable inside `call` would give float16 parameters and a
    float16 KL. The layers cast what enters the forward pass themselves.
    """
    return _keras_internals.AutocastScope(None)

"""Reading a variable's value as a tensor, once, on every backend.

`keras.ops.convert_to_tensor` hands a Keras variable back unchanged on
TensorFlow (a variable is a tensor there), so every later op would read it
again; `tf.convert_to_tensor` reads it once, which is what the variational
layers' graphs were built and measured with. On JAX a variable's value is
an array already.
"""

import keras

from tfp_bnn import _backend


def read(value):
    """The current value of `value` (a variable or a tensor) as a tensor."""
    if _backend.is_jax():
        return keras.ops.convert_to_tensor(value)
    import tensorflow as tf  # noqa: PLC0415 - the TensorFlow backend imported it

    return tf.convert_to_tensor(value)

"""Values and gradients of a scalar function on the active Keras backend, for the tests.

`tf.GradientTape` on TensorFlow, `jax.value_and_grad` on JAX, so one test
checks both. Layer weights enter as arguments through Keras'
`layer.stateless_call`.
"""

import keras
import numpy as np


def value_and_gradients(fn, *arguments):
    """(fn(*arguments), [d fn / d argument]) as NumPy arrays; fn returns a scalar."""
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415 - only on the JAX backend

        arguments = [jax.numpy.asarray(a) for a in arguments]
        value, grads = jax.value_and_grad(fn, argnums=tuple(range(len(arguments))))(*arguments)
    else:
        import tensorflow as tf  # noqa: PLC0415

        arguments = [tf.convert_to_tensor(a) for a in arguments]
        with tf.GradientTape() as tape:
            tape.watch(arguments)
            value = fn(*arguments)
        grads = tape.gradient(value, arguments)
    return np.asarray(value), [np.asarray(g) for g in grads]


def layer_value_and_gradients(layer, loss_fn, inputs, **call_kwargs):
    """loss_fn(layer(inputs)) and its gradients with respect to the layer's trainable weights."""
    non_trainable = [v.value for v in layer.non_trainable_variables]

    def fn(*trainable):
        outputs, _ = layer.stateless_call(list(trainable), non_trainable, inputs, **call_kwargs)
        return loss_fn(outputs)

    return value_and_gradients(fn, *[v.value for v in layer.trainable_variables])

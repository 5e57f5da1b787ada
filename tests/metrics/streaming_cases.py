"""A shared case of the streaming-metric tests: a classifier whose outputs are a fixed
function of its inputs, with one trainable layer they do not depend on, so that `fit`
has a step to take while the scores it reports stay those of a known function."""

import keras
import numpy as np

KERNEL = np.array([[2.0, -1.0, 0.5], [-1.5, 1.0, 2.0]], np.float32)
BIAS = [0.1, 0.0, -0.2]


def fixed_classifier(from_logits):
    """A keras.Model from [B, 2] inputs to 3 logits (or softmax probabilities)."""
    dense = keras.layers.Dense(
        3,
        kernel_initializer=keras.initializers.Constant(KERNEL),
        bias_initializer=keras.initializers.Constant(BIAS),
        activation=None if from_logits else "softmax",
        trainable=False,
    )
    # A trainable layer the output does not depend on (zero kernel), so `fit` has a step.
    scale = keras.layers.Dense(2, use_bias=False, kernel_initializer="zeros")
    inputs = keras.Input((2,))
    return keras.Model(inputs, dense(keras.layers.Add()([inputs, scale(inputs)])))

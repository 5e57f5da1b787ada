"""TensorFlow Probability for the active Keras backend.

TFP ships its distributions, bijectors and KL divergences on two numerical
substrates: TensorFlow (`tensorflow_probability`) and JAX
(`tensorflow_probability.substrates.jax`), with the same names and
semantics. Layers that put a TFP distribution inside a Keras computation
must take the one whose arrays the backend computes with: this module
chooses it once, from `keras.backend.backend()`, and every module that
needs TFP inside a layer's computation imports `tfp`, `tfd` and `tfb` from
here.
"""

import keras

if keras.backend.backend() == "jax":
    from tensorflow_probability.substrates import jax as tfp
else:
    import tensorflow_probability as tfp

tfd = tfp.distributions
tfb = tfp.bijectors

__all__ = ["tfb", "tfd", "tfp"]

"""The Dense floor of the Monte Carlo predict benchmarks on Keras' JAX backend.

A model's forward pass as JAX runs it fastest: its stateless call under
`jax.jit`, with the weights passed in, waited for (JAX dispatches
asynchronously). Used by predict.py (`--backend jax`) and gpu/_worker.py; no
TensorFlow here.
"""


def dense_floor(model, x, samples):
    """A function running `samples` forward passes of `model` over `x`, the last waited for."""
    import jax  # noqa: PLC0415 - only on the JAX backend

    forward = jax.jit(lambda trainable, fixed, inputs: model.stateless_call(
        trainable, fixed, inputs, training=False)[0])
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]
    x = jax.device_put(x)

    def run():
        for _ in range(samples):
            out = forward(trainable, fixed, x)
        return jax.block_until_ready(out)

    return run

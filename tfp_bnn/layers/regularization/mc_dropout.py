"""Dropout that stays on at prediction: Monte Carlo dropout."""


import keras
from tfp_bnn._tf import tf
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation
from tfp_bnn import noise


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MCDropout(keras.layers.Layer):
    """Dropout kept on at inference, for Monte Carlo dropout (Gal and Ghahramani 2016).

    A network with dropout before its weight layers is a variational
    approximation of a Bayesian network whose weights are the rows of M
    switched on or off by Bernoulli variables (Gal and Ghahramani 2016,
    sec. 3 and appendix). Averaging T stochastic forward passes estimates the predictive
    mean; their spread is the epistemic uncertainty. `keras.layers.Dropout`
    is the identity at inference, so it cannot do this; `MCDropout` drops
    units with probability `rate` (scaling the kept ones by 1/(1-rate)) in
    training and at inference alike.

    Like the variational layers it obeys mean mode (`tfp_bnn.set_mean_mode`):
    there it is the identity, which is standard dropout's weight-averaging
    approximation. `tfp_bnn.predict` draws the T masks inside one traced
    computation. For the prior length-scale, weight decay and model
    precision that go with a dropout rate, see `tfp_bnn.mc_dropout`.

    Args:
        rate: float in [0, 1), the probability of dropping a unit.
        noise_shape: as in `keras.layers.Dropout`: the shape of the binary
            mask, with None entries taken from the inputs (e.g.
            `(None, 1, channels)` drops whole channels of a sequence).
        seed: int or None, seeds the masks.

    Call arguments:
        inputs: a tensor of any rank.
        training: ignored for the mask (always drawn, except in mean mode
            at inference).

    Returns:
        A tensor of the inputs' shape.

    Example:
    >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(50, activation="relu"),
    ...                           MCDropout(0.1), keras.layers.Dense(1)])
    >>> x = np.ones((1, 8), "float32")
    >>> bool(model(x) != model(x))   # dropout stays on at inference
    True
    """

    # Has a `sampling` switch that tfp_bnn.set_mean_mode turns (tfp_bnn/modes.py).
    stochastic_layer = True

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _validation.number("rate", rate, low=0, high=1, high_open=True)
        if noise_shape is not None:
            noise_shape = tuple(_validation.integer("noise_shape", d, allow_none=True)
                                for d in noise_shape)
        self.noise_shape = noise_shape
        self.seed = _validation.seed(seed, allow_none=True)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        # 1.0: masks at inference; 0.0: identity at inference (mean mode).
        self.sampling = self.add_weight(
            name="sampling", shape=(), dtype="float32", initializer="ones", trainable=False
        )
        self.supports_masking = True

    def build(self, input_shape):
        self._check_noise_shape(len(input_shape), input_shape)

    def _check_noise_shape(self, rank, shape):
        if self.noise_shape is not None and len(self.noise_shape) != rank:
            raise ValueError(
                f"`noise_shape` {self.noise_shape} has {len(self.noise_shape)} entries but the "
                f"inputs have rank {rank} (shape {tuple(shape)})."
            )

    def _mask_shape(self, inputs):
        # TensorFlow: a dynamic shape tensor, as the Philox kernels take it;
        # JAX: the static shape, which every array has under jit.
        shape = ops.shape(inputs) if _backend.is_jax() else tf.shape(inputs)
        if self.noise_shape is None:
            return shape
        self._check_noise_shape(len(inputs.shape), inputs.shape)
        dims = [shape[i] if d is None else d for i, d in enumerate(self.noise_shape)]
        return tuple(dims) if _backend.is_jax() else tf.stack(dims)

    def _uniform(self, inputs):
        """U[0, 1) draws of the mask's shape, float32."""
        if _backend.is_jax():
            return keras.random.uniform(self._mask_shape(inputs), seed=self.seed_generator)
        # tfp_bnn.noise names its algorithm: keras.random's default runs
        # several times slower under XLA on CPU (see tfp_bnn/noise.py).
        return noise.uniform(self._mask_shape(inputs), noise.next_seed(self.seed_generator))

    def call(self, inputs, training=None):
        inputs = ops.convert_to_tensor(inputs)
        if self.rate == 0:
            return inputs
        dtype = inputs.dtype
        uniform = self._uniform(inputs)
        keep = ops.cast(uniform >= self.rate, dtype) / ops.cast(1.0 - self.rate, dtype)
        if not training:
            # Mean mode: keep = 1 everywhere; sampling: the drawn mask.
            sampling = ops.cast(self.sampling, dtype)
            keep = 1.0 + sampling * (keep - 1.0)
        return inputs * keep

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed})
        return config

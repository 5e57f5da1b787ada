"""`LaplaceDense`: a Dense layer whose weights are drawn from a Laplace posterior."""

import keras
import numpy as np
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import _validation as check
from tfp_bnn import noise
from tfp_bnn.laplace.curvature import LIKELIHOODS
from tfp_bnn.laplace.curvature import STRUCTURES
from tfp_bnn._tf import tf
from tfp_bnn.layers._tracing import sample_context


def _noise_shape(num_samples, *dims):
    """The shape of S noise draws: static on JAX (S an int under `jax.jit`), one
    stacked shape tensor on TensorFlow (S may be a scalar tensor there)."""
    if _backend.is_jax():
        return (int(num_samples),) + dims
    return tf.stack([num_samples, *dims])


def _matmul_transposed(a, b):
    """a b^T. TensorFlow keeps its fused `transpose_b` kernel, whose rounding
    differs from a transpose then a matmul for a single row; JAX transposes."""
    if _backend.is_jax():
        return ops.matmul(a, ops.transpose(b))
    return tf.matmul(a, b, transpose_b=True)

@keras.saving.register_keras_serializable(package="tfp_bnn")
class LaplaceDense(keras.layers.Layer):
    """A last layer with Gaussian weights N(theta*, S) from a post-hoc Laplace approximation.

    Made and filled by `tfp_bnn.laplace.LastLayerLaplace.predictive_model`, which fits the
    posterior of a trained model's last `keras.layers.Dense` (Daxberger et al. 2021, "Laplace
    Redux", NeurIPS). The weights W [P, K] (the bias as the last row P = D + 1) are
    theta* + L eps with S = L L^T stored as non-trainable weights: "full" keeps L [PK, PK];
    "kron" keeps U_A [P, P], U_G [K, K] and scales [P, K], W = theta* + U_A (scales * E) U_G^T
    (see `tfp_bnn.laplace.curvature.Eigenbasis`).

    It takes part in Monte Carlo prediction like tfp_bnn's variational layers: inside
    `tfp_bnn.predict` (a `sample_trace` of S samples) tile s of the inputs meets weight sample
    s; a plain call at inference draws one weight sample for the batch; in mean mode
    (`tfp_bnn.set_mean_mode`) and in training it uses theta*. Deviation: `tfp_bnn.predict`
    pre-draws only `BayesianLayer` weights, so this layer draws its own samples per call and
    inputs in different input chunks meet different (equally distributed) weight samples.

    Args:
        units: K, the outputs of the Dense layer it replaces.
        use_bias: whether phi carries a constant 1 (the Dense's bias).
        structure: "full" or "kron", the covariance factorisation.
        likelihood: "classification" (outputs the K logits) or "regression" (outputs the K
            sampled means then K copies of log sigma^2: tfp_bnn's "mean_log_variance"
            convention, see `tfp_bnn.predict.regression`).
        noise_variance: sigma^2 > 0 for likelihood="regression".
        seed: int or None, seeds the weight draws.
        **kwargs: base layer keyword arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: features [B, D].
        training: True uses theta* (the layer has nothing to train).

    Returns:
        [B, K] logits or [B, 2K] means and log variances.

    Example:
    >>> layer = LaplaceDense(2, structure="kron")
    >>> layer.build((None, 3))   # P = 3 + 1 with the bias
    >>> layer.set_posterior(np.zeros((4, 2)), (np.eye(4), np.eye(2), np.full((4, 2), 0.1)))
    >>> tuple(layer.predictive_samples(5).shape)   # theta* + U_A (scales * E) U_G^T
    (5, 4, 2)
    >>> tuple(layer(np.ones((3, 3), "float32")).shape)
    (3, 2)
    """

    stochastic_layer = True

    def __init__(self, units, use_bias=True, structure="full", likelihood="classification",
                 noise_variance=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = check.integer("units", units)
        self.use_bias = check.boolean("use_bias", use_bias)
        self.structure = check.one_of("structure", structure, STRUCTURES)
        self.likelihood = check.one_of("likelihood", likelihood, LIKELIHOODS)
        self.noise_variance = check.positive("noise_variance", noise_variance,
                                             allow_none=likelihood == "classification")
        self.seed = check.seed(seed, allow_none=True)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        self.sampling = self.add_weight(name="sampling", shape=(), dtype="float32",
                                        initializer="ones", trainable=False)

    def build(self, input_shape):
        if len(input_shape) != 2 or input_shape[-1] is None:
            raise ValueError(f"LaplaceDense needs features [batch, D] with D known, got shape "
                             f"{tuple(input_shape)}.")
        rows, units = int(input_shape[-1]) + int(self.use_bias), self.units

        def weight(name, shape):
            return self.add_weight(name=name, shape=shape, initializer="zeros",
                                   trainable=False)

        self.loc = weight("loc", (rows, units))
        if self.structure == "full":
            self.factors = (weight("covariance_factor", (rows * units, rows * units)),)
        else:
            self.factors = (weight("feature_basis", (rows, rows)),
                            weight("output_basis", (units, units)),
                            weight("scales", (rows, units)))

    def set_posterior(self, loc, factors):
        """Assigns theta* and the covariance factors of the posterior.

        Args:
            loc: theta* as W [P, K] (the bias as the last row).
            factors: what `Eigenbasis.sampling_factors` returns: (L [PK, PK],)
                for "full", (U_A [P, P], U_G [K, K], scales [P, K]) for "kron".
        """
        self.loc.assign(np.asarray(loc, self.loc.dtype))
        for variable, value in zip(self.factors, factors):
            variable.assign(np.asarray(value, variable.dtype))

    def predictive_samples(self, num_samples):
        """Weight samples from the posterior (all theta* in mean mode).

        Args:
            num_samples: S, an int or a scalar int tensor.

        Returns:
            A tensor [S, P, K].
        """
        rows, units = self.loc.shape
        seed = noise.next_seed(self.seed_generator)
        scale = ops.cast(self.sampling, self.compute_dtype)
        if self.structure == "full":
            eps = noise.normal(_noise_shape(num_samples, rows * units), self.compute_dtype, seed)
            deltas = _matmul_transposed(eps, self.factors[0])
            deltas = ops.reshape(deltas, (-1, rows, units))
        else:
            feature_basis, output_basis, scales = self.factors
            eps = noise.normal(_noise_shape(num_samples, rows, units), self.compute_dtype, seed)
            deltas = ops.einsum("ij,sjk,lk->sil", feature_basis, eps * scales, output_basis)
        return self.loc[None] + scale * deltas

    def _phi(self, inputs):
        inputs = ops.cast(inputs, self.compute_dtype)
        if not self.use_bias:
            return inputs
        return ops.concatenate([inputs, ops.ones_like(inputs[:, :1])], axis=-1)

    def call(self, inputs, training=None):
        phi = self._phi(inputs)
        context = sample_context()
        if training:
            outputs = ops.matmul(phi, self.loc)
        elif context is not None:
            count = context.num_samples
            weights = context.draws.get(id(self))
            weights = self.predictive_samples(count) if weights is None else weights
            sliced = ops.reshape(phi, (count, -1, phi.shape[-1]))
            outputs = ops.reshape(ops.matmul(sliced, weights), (-1, self.units))
        else:
            outputs = ops.matmul(phi, self.predictive_samples(1)[0])
        if self.likelihood == "classification":
            return outputs
        log_variance = ops.log(ops.cast(self.noise_variance, outputs.dtype))
        return ops.concatenate([outputs, ops.broadcast_to(log_variance, ops.shape(outputs))],
                               axis=-1)

    def compute_output_shape(self, input_shape):
        width = self.units if self.likelihood == "classification" else 2 * self.units
        return (input_shape[0], width)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "use_bias": self.use_bias,
                       "structure": self.structure, "likelihood": self.likelihood,
                       "noise_variance": self.noise_variance, "seed": self.seed})
        return config

"""The full-covariance Gaussian posterior over a weight tensor.

Registered in `tfp_bnn.posteriors` as "full_covariance_normal" and importable
from there.
"""

import collections
import math

import keras
from keras import ops

from tfp_bnn import _backend
from tfp_bnn import noise
from tfp_bnn._substrate import tfp
from tfp_bnn._tf import tf
from tfp_bnn.posteriors.base import NormalPosterior
from tfp_bnn.posteriors.base import PosteriorDraw
from tfp_bnn.posteriors.base import seeded_initializer

tfd = tfp.distributions
tfb = tfp.bijectors

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# loc in the weight shape; scale_tril [D, D] for the flattened weights.
FullCovariancePrepared = collections.namedtuple("FullCovariancePrepared", ["loc", "scale_tril"])


@keras.saving.register_keras_serializable(package="tfp_bnn")
class FullCovarianceNormal(NormalPosterior):
    """Gaussian posterior with a full covariance over a whole weight tensor.

    TFP's `MultivariateNormalTriL` over the D flattened weights: w = loc + L
    eps with eps ~ N(0, I_D) and L lower triangular with a positive diagonal,

        L = diag(scale_offset + softplus(rho)) + strictly_lower(fill_triangular(v)),

    as TFP's `tfb.FillScaleTriL` builds it. Every pair of weights can be
    correlated; with `tfp_bnn.layers.DenseVariational`, whose one posterior
    covers [kernel, bias], so can kernel and bias.

    `build` adds `loc` and `rho` (shaped like the weights, initialised as in
    `MeanFieldNormal`: near a point mass) and `tril`, the D (D - 1) / 2
    off-diagonal entries, initialised at 0. The parameter count grows as
    D^2 / 2: meant for small layers. TFP's `VariableLayer` +
    `MultivariateNormalTriL` posterior (keras.io's "Probabilistic Bayesian
    Neural Networks") starts instead at loc 0, L = (1e-5 + softplus(0)) I:
    `FullCovarianceNormal(rho_init=0.0, rho_init_stddev=0.0, scale_offset=1e-5)`
    with `kernel_initializer="zeros"`.

    The KL to a Normal prior (`NormalPrior`, `TrainableNormalPrior`) is in
    closed form; to other priors layers use the Monte Carlo estimate. Not
    location-scale element-wise, so Flipout, local reparameterization and
    moment propagation refuse it; `DenseVariational` and the
    reparameterization layers take it.

    Args:
        rho_init: mean of the initial rho values (the log-scale of the diagonal).
        rho_init_stddev: spread of the initial rho values, >= 0.
        scale_offset: added to the diagonal softplus(rho), >= 0.

    Example:
    >>> layer = tfp_bnn.layers.DenseVariational(
    ...     2, posterior=FullCovarianceNormal(), kl_weight=1 / 1000)
    >>> _ = layer(np.ones((1, 3), "float32"))
    >>> layer.kernel_posterior.event_shape   # kernel (3 x 2) and bias (2): one joint Gaussian
    TensorShape([8])
    """

    is_location_scale = False

    def build(self, layer, name, shape, loc_initializer="glorot_uniform",
              regularizer=None, constraint=None, seed=None):
        shape = tuple(shape)
        size = math.prod(shape)
        loc = layer.add_weight(
            name=f"{name}_loc", shape=shape, initializer=seeded_initializer(loc_initializer, seed),
            regularizer=regularizer, constraint=constraint, trainable=True,
        )
        rho = layer.add_weight(
            name=f"{name}_rho", shape=shape, trainable=True,
            initializer=keras.initializers.RandomNormal(
                mean=self.rho_init, stddev=self.rho_init_stddev,
                seed=None if seed is None else int(seed) + 1),
        )
        tril = layer.add_weight(name=f"{name}_tril", shape=(size * (size - 1) // 2,),
                                initializer="zeros", trainable=True)
        return (loc, rho, tril)

    def prepare(self, params):
        """(loc, scale_tril): the loc in the weight shape, L for the flattened weights.

        Args:
            params: the variables `build` returned.

        Returns:
            (loc, scale_tril): loc in the weight shape, scale_tril [D, D].
        """
        loc, rho, tril = (ops.convert_to_tensor(p) for p in params)
        diag = ops.softplus(ops.reshape(rho, [-1]))
        if self.scale_offset:
            diag = diag + self.scale_offset
        # fill_triangular gives a (D-1) x (D-1) lower triangle; one row above and
        # one column to its right make it the strictly lower part of D x D.
        # Its diagonal is zero, so adding diag(d) sets the diagonal exactly.
        lower = ops.pad(tfp.math.fill_triangular(tril), [[1, 0], [0, 1]])
        return FullCovariancePrepared(loc, lower + ops.diag(diag))

    def distribution(self, prepared):
        """q(w) as a `MultivariateNormalTriL`, reshaped to the weight shape (event).

        Args:
            prepared: what `prepare` returned.

        Returns:
            `tfd.MultivariateNormalTriL` (event shape [D]) for a vector weight, else
            that distribution reshaped to the weight shape.
        """
        loc, scale_tril = prepared
        mvn = tfd.MultivariateNormalTriL(loc=ops.reshape(loc, [-1]), scale_tril=scale_tril)
        if loc.shape.rank == 1:
            return mvn
        return tfd.TransformedDistribution(
            mvn, tfb.Reshape(event_shape_out=tuple(loc.shape), event_shape_in=(mvn.event_shape[0],))
        )

    def mean(self, prepared):
        return prepared.loc

    def _perturbations(self, prepared, eps):
        """L eps for eps [S, D], reshaped to [S, *weight shape]."""
        loc, scale_tril = prepared
        if _backend.is_jax():
            product = ops.matmul(eps, ops.transpose(scale_tril))
        else:  # transpose_b: TensorFlow's kernel, the numbers the seeded tests hold
            product = tf.matmul(eps, scale_tril, transpose_b=True)
        return ops.reshape(product, [-1] + list(loc.shape))

    def sample(self, prepared, seed, dtype, noise_scale):
        return self.sample_n(prepared, 1, seed, dtype, noise_scale)[0]

    def sample_n(self, prepared, num_samples, seed, dtype, noise_scale):
        eps = noise.normal((num_samples, prepared.scale_tril.shape[0]), "float32", seed)
        eps = eps * ops.cast(noise_scale, "float32")
        delta = self._perturbations(prepared, eps)
        return ops.cast(ops.cast(prepared.loc, "float32") + delta, dtype)

    def kl(self, prepared, prior):
        """KL(N(m, L L^T) || N(m0, diag(s0^2))) in closed form, for a Normal prior:

            0.5 * (sum_ij L_ij^2 / s0_i^2 + sum_i ((m_i - m0_i) / s0_i)^2 - D)
            + sum_i log s0_i - sum_i log L_ii.

        Args:
            prepared: what `prepare` returned.
            prior: a `tfp_bnn.priors.Prior` of the same weights.

        Returns:
            A float32 scalar, the KL in nats.
        """
        p = prior.element_distribution("float32")
        if not isinstance(p, tfd.Normal):
            raise NotImplementedError(
                f"{type(self).__name__} has a closed-form KL to Normal priors only, "
                f"got {prior!r}; use the Monte Carlo KL (kl_estimator='mc')."
            )
        loc, scale_tril = prepared
        shape = tuple(loc.shape)
        m0 = ops.reshape(ops.broadcast_to(p.loc, shape), [-1])
        s0 = ops.reshape(ops.broadcast_to(p.scale, shape), [-1])
        m = ops.reshape(ops.cast(loc, "float32"), [-1])
        trace = ops.sum(ops.square(scale_tril / s0[:, None]))
        mahalanobis = ops.sum(ops.square((m - m0) / s0))
        size = float(math.prod(shape))
        log_det_ratio = ops.sum(ops.log(s0)) - ops.sum(ops.log(ops.diagonal(scale_tril)))
        return 0.5 * (trace + mahalanobis - size) + log_det_ratio

    def draw(self, params, seed, dtype, prior=None, with_noise=True):
        """The perturbation L eps with log q of the sample, computed from eps:

            log q(w) = sum(-eps^2 / 2) - sum(log L_ii) - D log(2 pi) / 2.

        Args:
            params: the variables `build` returned.
            seed: an int32 seed pair (shape [2]) for the noise, or None without noise.
            dtype: the layer's compute dtype, for the perturbation.
            prior: a prior to take the closed-form KL to, or None.
            with_noise: False skips the perturbation (it is then None).

        Returns:
            `PosteriorDraw(prepared, perturbation, kl, log_prob)`.
        """
        prepared = self.prepare(params)
        perturbation = log_prob = None
        if with_noise:
            if seed is None:
                seed = noise.zero_seed()
            eps = noise.normal((1, prepared.scale_tril.shape[0]), "float32", seed)
            perturbation = ops.cast(self._perturbations(prepared, eps)[0], dtype)
            log_prob = (ops.sum(-0.5 * ops.square(eps))
                        - ops.sum(ops.log(ops.diagonal(prepared.scale_tril)))
                        - _HALF_LOG_2PI * float(prepared.scale_tril.shape[0]))
        kl = None if prior is None else self.kl(prepared, prior)
        return PosteriorDraw(prepared, perturbation, kl, log_prob)

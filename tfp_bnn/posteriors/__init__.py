"""Variational posteriors: small registered classes that own no state.

A posterior object is configuration. `build(layer, name, shape, ...)` creates
the variational parameters as weights of the layer that uses it and returns
them; the other methods turn those parameters into a TFP distribution, its
mean, or a reparameterised sample. The same posterior object can therefore
serve a kernel and a bias, or many layers.

The contract a layer relies on (`tfp_bnn.layers.BayesianLayer`); the base
class `Posterior` derives everything else (`draw`, `sample_n`) from these:

- `build(layer, name, shape, loc_initializer, regularizer, constraint, seed)`
  creates the parameters with `layer.add_weight(name=f"{name}_...")` and
  returns them as a tuple of variables (the layer takes gradients of the
  loss with respect to them; the loc initializer, regularizer and constraint
  are the layer's kernel or bias arguments).
- `prepare(params)`: tensors derived once per call (default: the params).
- `distribution(prepared)`: q as a TFP distribution, element-wise (batch
  shape = the weight shape) or one joint distribution whose event is the
  weight tensor; the Monte Carlo KL sums its `log_prob`.
- `mean(prepared)`: the posterior mean, in the weight shape (mean mode).
- `sample(prepared, seed, dtype, noise_scale)`: a reparameterised sample
  mean + noise_scale * (w - mean) in `dtype`, from the int32 seed pair `seed`
  (use stateless ops: `tf.random.stateless_normal(shape, seed, dtype=dtype)`).
- optionally `kl(prepared, prior)` (the closed-form KL, summed) and
  `is_location_scale = True` with `loc_scale(prepared)` for Flipout, local
  reparameterization and moment propagation.
- `get_config()`, and registration under your package, for `.keras` files
  that load with `safe_mode=True`.

The node-based layers (`tfp_bnn.layers.NodeDense`, `NodeConv2D`) keep their
weights deterministic and take the posterior of their random nodes as
`NodeGaussian()` or `NodeFlow(flows, length)` (module `node`), configuration
objects of the same kind.

Example, a Gaussian posterior with one learned scale per weight tensor
(tests/integration/test_custom_posterior_prior.py runs this):

    @keras.saving.register_keras_serializable(package="my_project")
    class SharedScaleNormal(tfp_bnn.posteriors.Posterior):
        def __init__(self, rho_init=-3.0):
            self.rho_init = float(rho_init)

        def build(self, layer, name, shape, loc_initializer="glorot_uniform",
                  regularizer=None, constraint=None, seed=None):
            loc = layer.add_weight(name=f"{name}_loc", shape=shape,
                                   initializer=loc_initializer,
                                   regularizer=regularizer, constraint=constraint)
            rho = layer.add_weight(name=f"{name}_rho", shape=(),
                                   initializer=keras.initializers.Constant(self.rho_init))
            return (loc, rho)

        def prepare(self, params):
            return tf.convert_to_tensor(params[0]), tf.nn.softplus(params[1])

        def distribution(self, prepared):
            loc, scale = prepared
            return tfd.Normal(loc, scale * tf.ones_like(loc))

        def mean(self, prepared):
            return prepared[0]

        def sample(self, prepared, seed, dtype, noise_scale):
            loc, scale = (tf.cast(t, dtype) for t in prepared)
            eps = tf.random.stateless_normal(tf.shape(loc), seed, dtype=dtype)
            return loc + scale * eps * noise_scale

        def get_config(self):
            return {"rho_init": self.rho_init}
"""

from tfp_bnn.config_objects import resolve
from tfp_bnn.posteriors.base import Posterior
from tfp_bnn.posteriors.base import PosteriorDraw
from tfp_bnn.posteriors.base import seeded_initializer
from tfp_bnn.posteriors.constraints import ClipValue
from tfp_bnn.posteriors.flow import FlowPosterior
from tfp_bnn.posteriors.full_covariance import FullCovarianceNormal
from tfp_bnn.posteriors.mean_field import MeanFieldNormal
from tfp_bnn.posteriors.node import NodeFlow
from tfp_bnn.posteriors.node import NodeGaussian

__all__ = ["ClipValue", "FlowPosterior", "FullCovarianceNormal", "MeanFieldNormal", "NodeFlow",
           "NodeGaussian", "Posterior", "PosteriorDraw", "get", "seeded_initializer"]

_POSTERIORS = {"mean_field_normal": MeanFieldNormal, "flow": FlowPosterior,
               "full_covariance_normal": FullCovarianceNormal}


def get(identifier):
    """Resolves `identifier` to a `Posterior`.

    Accepts a `Posterior`, `None` (the `MeanFieldNormal` default), a name
    from `{"mean_field_normal", "flow", "full_covariance_normal"}` (default
    arguments), or a serialized dict.

    Args:
        identifier: a `Posterior`, None, one of those names, or the dict
            `keras.saving.serialize_keras_object` made of a posterior.

    Returns:
        A `Posterior`.

    Example:
    >>> get(None)
    MeanFieldNormal(rho_init=-3.0, rho_init_stddev=0.1, scale_offset=0.0)
    >>> type(get("full_covariance_normal")).__name__
    'FullCovarianceNormal'
    """
    return resolve(identifier, Posterior, _POSTERIORS, "posterior", default=MeanFieldNormal)

"""Closed-form KL divergences between an `Independent` and a `Sample` distribution.

A variational layer exposes its posterior and prior as TFP does
(`layer.kernel_posterior`, `layer.kernel_prior`), so that TFP's inspection
idiom `tfd.kl_divergence(layer.kernel_posterior, layer.kernel_prior)` works.
The posterior of a mean-field weight is `Independent(Normal(loc, scale), r)`
with parameters in the weight's shape; a prior with scalar parameters is
`Sample(Normal(loc, scale), weight_shape)`, which never materialises a
parameter tensor the size of the weight. TFP registers no KL between the two
wrappers, so this module registers it (importing `tfp_bnn` does): both spread
one element distribution over the same event axes, so

    KL(Independent(a, r) || Sample(b, S)) = sum over the r event axes of KL(a || b)

(exact whenever TFP has the element-wise KL(a || b), e.g. Normal || Normal),
and the same with the roles swapped. Pairs that do not line up (different
event shapes, or elements whose own event shapes differ) raise
NotImplementedError, as TFP does for an unregistered pair.
"""

import keras
from tfp_bnn._substrate import tfp

from tfp_bnn._substrate import tfd as substrate_tfd


def _elementwise(distribution, tfd):
    """(element distribution, number of event axes it is spread over).

    The element's batch axes line up with the whole distribution's batch
    axes followed by those event axes, so KLs of two elements broadcast.
    """
    if isinstance(distribution, tfd.Independent):
        return distribution.distribution, int(distribution.reinterpreted_batch_ndims)
    element = distribution.distribution
    axes = len(distribution.event_shape) - len(element.event_shape)
    if element.batch_shape.rank:  # a batch of elements: add the sampled axes after it
        element = element[(Ellipsis,) + (None,) * axes]
    return element, axes


def _spread_kl(tfd, a, b, name=None):
    """KL(a || b) of two distributions that spread elements over the same event axes."""
    with keras.name_scope(name or "kl_independent_sample"):
        element_a, axes_a = _elementwise(a, tfd)
        element_b, axes_b = _elementwise(b, tfd)
        if (a.event_shape != b.event_shape or axes_a != axes_b
                or element_a.event_shape != element_b.event_shape):
            raise NotImplementedError(
                f"KL({type(a).__name__} || {type(b).__name__}) needs the same event shape "
                f"built from elements of the same event shape, got {a.event_shape} from "
                f"{element_a.event_shape} and {b.event_shape} from {element_b.event_shape}."
            )
        kl = tfd.kl_divergence(element_a, element_b)
        return keras.ops.sum(kl, axis=tuple(range(-axes_a, 0))) if axes_a else kl


def _register(tfd, type_a, type_b):
    def spread_kl(a, b, name=None):
        return _spread_kl(tfd, a, b, name)

    try:
        tfd.RegisterKL(type_a, type_b)(spread_kl)
    except ValueError:  # TFP registered the pair itself (a later release): use TFP's
        pass


# With TensorFlow's distributions, and on JAX with TFP's JAX substrate's too.
for _tfd in {tfp.distributions, substrate_tfd}:
    _register(_tfd, _tfd.Independent, _tfd.Sample)
    _register(_tfd, _tfd.Sample, _tfd.Independent)

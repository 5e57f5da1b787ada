"""The inner projection of the heteroscedastic heads (regression and classification).

A head owns one Dense-like layer (plain, Flipout or reparameterization) that
maps its inputs to twice its outputs; every keyword argument the head does not
take itself goes to that projection and back into the head's config.
"""

import keras

from tfp_bnn import _validation
from tfp_bnn.layers.variational.dense_flipout import DenseFlipout
from tfp_bnn.layers.variational.dense_reparameterization import DenseReparameterization

PROJECTIONS = {
    "dense": keras.layers.Dense,
    "flipout": DenseFlipout,
    "reparameterization": DenseReparameterization,
}

# Arguments of the head itself; every other keyword goes to the projection.
_BASE_LAYER_KWARGS = ("name", "dtype", "trainable")
# Fixed by the head: the projection's width and its linear output.
_RESERVED_PROJECTION_KWARGS = ("units", "activation")


def split_layer_kwargs(kwargs):
    """Splits keyword arguments into (head's own, projection's)."""
    own = {k: kwargs.pop(k) for k in _BASE_LAYER_KWARGS if k in kwargs}
    for key in _RESERVED_PROJECTION_KWARGS:
        if key in kwargs:
            raise ValueError(
                f"`{key}` cannot be passed to the projection of a heteroscedastic head "
                f"(its width and linear output are fixed by the head), got {key}="
                f"{kwargs[key]!r}."
            )
    return own, kwargs


def make_projection(projection, units, dtype, projection_kwargs):
    """Builds the inner projection layer `projection` with `units` outputs."""
    _validation.one_of("projection", projection, PROJECTIONS)
    cls = PROJECTIONS[projection]
    try:
        return cls(units, name="projection", dtype=dtype, **projection_kwargs)
    except TypeError as error:  # e.g. a keyword the layer's signature lacks
        raise ValueError(
            f"Bad keyword arguments {sorted(projection_kwargs)} for projection "
            f"{projection!r} ({cls.__name__}): {error}"
        ) from error


def projection_kwargs_config(layer, projection_kwargs):
    """The projection's keyword arguments in serialized (plain) form.

    The projection layer's own config already holds initializers, priors,
    posteriors, regularizers... serialized; its value for each key the user
    passed is what `from_config` hands back to the constructor.
    """
    inner = layer.get_config()
    config = {}
    for key, value in projection_kwargs.items():
        if key in inner:
            config[key] = inner[key]
        elif value is None or isinstance(value, (bool, int, float, str)):
            config[key] = value
        else:
            config[key] = keras.saving.serialize_keras_object(value)
    return config

"""Every public layer shows its arguments: `help()`, an IDE and `inspect.signature` list them.

A Bayesian layer lists what its Keras counterpart lists (as `keras.layers.Conv2D`
lists its 16 arguments rather than `**kwargs`), in Keras' order, plus its own
Bayesian arguments; every entry of its config is a named parameter, so nothing
it stores hides in `**kwargs`.
"""

import inspect

import keras
import pytest

from tfp_bnn import layers

# The Keras arguments the Bayesian layers do not take, each a documented
# deviation: LoRA and quantization act on a deterministic kernel, and
# `Embedding(weights=)` sets a matrix the posterior replaces.
NOT_TAKEN = {"lora_rank", "lora_alpha", "quantization_config", "weights"}

VARIATIONAL = ("posterior", "prior", "kl_weight", "kl_estimator", "seed")
NODE = ("posterior", "kl_weight", "seed")

# name -> (Keras counterpart, its Bayesian arguments, a small instance)
COUNTERPARTS = {
    "DenseReparameterization": (keras.layers.Dense, VARIATIONAL + ("bayesian_bias",),
                                lambda c: c(3)),
    "DenseFlipout": (keras.layers.Dense, VARIATIONAL + ("bayesian_bias",), lambda c: c(3)),
    "DenseLocalReparameterization": (keras.layers.Dense, VARIATIONAL + ("bayesian_bias",),
                                     lambda c: c(3)),
    "DenseVariational": (keras.layers.Dense, VARIATIONAL + ("kl_use_exact",), lambda c: c(3)),
    "EmbeddingReparameterization": (keras.layers.Embedding, VARIATIONAL, lambda c: c(10, 3)),
    "LSTMCellReparameterization": (keras.layers.LSTMCell, VARIATIONAL + ("bayesian_bias",),
                                   lambda c: c(3)),
    "LSTMCellFlipout": (keras.layers.LSTMCell, VARIATIONAL + ("bayesian_bias",), lambda c: c(3)),
    "GRUCellReparameterization": (keras.layers.GRUCell, VARIATIONAL + ("bayesian_bias",),
                                  lambda c: c(3)),
    "GRUCellFlipout": (keras.layers.GRUCell, VARIATIONAL + ("bayesian_bias",), lambda c: c(3)),
    "NodeDense": (keras.layers.Dense, NODE, lambda c: c(3)),
    "NodeConv2D": (keras.layers.Conv2D, NODE, lambda c: c(3, 2)),
}
# The cheap ensembles (tfp_bnn.layers.ensemble): the member count and the fast weights'
# arguments are theirs; their members set the grouping, so they take no `groups`.
FAST_WEIGHTS = ("num_members", "fast_weight_initializer", "fast_weight_regularizer",
                "fast_weight_constraint")
PACKED = ("num_members", "alpha", "gamma", "first", "last")
COUNTERPARTS.update({
    "BatchEnsembleDense": (keras.layers.Dense, FAST_WEIGHTS, lambda c: c(3, 2)),
    "BatchEnsembleConv2D": (keras.layers.Conv2D, FAST_WEIGHTS, lambda c: c(3, 2, 2)),
    "PackedDense": (keras.layers.Dense, PACKED, lambda c: c(4, 2)),
    "PackedConv2D": (keras.layers.Conv2D, PACKED, lambda c: c(4, 2, 2)),
})
NOT_TAKEN_BY = {"BatchEnsembleConv2D": {"groups"}, "PackedConv2D": {"groups"}}
for _rank in (1, 2, 3):
    for _estimator in ("Reparameterization", "Flipout"):
        COUNTERPARTS[f"Conv{_rank}D{_estimator}"] = (
            getattr(keras.layers, f"Conv{_rank}D"), VARIATIONAL + ("bayesian_bias",),
            lambda c: c(3, 2))

# DenseVariational keeps TFP's leading order (units, posterior, prior,
# kl_weight, kl_use_exact, ...) so that TFP code ports by its imports alone.
TFP_ORDER = {"DenseVariational"}

# Public layers that genuinely take one argument.
ONE_ARGUMENT = {"HomoscedasticNoise", "EnsembleTile", "EnsembleUntile", "PackedOutput"}


def _named(cls):
    return [name for name, p in inspect.signature(cls).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _public_layers():
    return sorted(name for name in layers.__all__
                  if inspect.isclass(getattr(layers, name))
                  and issubclass(getattr(layers, name), keras.layers.Layer))


@pytest.mark.parametrize("name", _public_layers())
def test_no_public_layer_hides_its_arguments_in_kwargs(name):
    named = _named(getattr(layers, name))
    assert len(named) > 1 or name in ONE_ARGUMENT, (
        f"{name}{inspect.signature(getattr(layers, name))} hides its arguments in **kwargs")


def test_every_layer_with_a_keras_counterpart_is_checked_below():
    # A new public layer named after a Keras one must join COUNTERPARTS.
    keras_names = ("Dense", "Conv1D", "Conv2D", "Conv3D", "Embedding", "LSTMCell", "GRUCell")
    ours = {name for name in _public_layers()
            if any(k in name for k in keras_names) and not name.startswith("Convolution")}
    assert ours == set(COUNTERPARTS)


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_signature_lists_the_keras_counterparts_arguments_and_the_bayesian_ones(name):
    counterpart, bayesian, _ = COUNTERPARTS[name]
    ours = _named(getattr(layers, name))
    theirs = [n for n in _named(counterpart)
              if n not in NOT_TAKEN | NOT_TAKEN_BY.get(name, set())]
    missing = [n for n in theirs + list(bayesian) if n not in ours]
    assert not missing, f"{name} does not list {missing}"
    if name not in TFP_ORDER:
        assert [n for n in ours if n in theirs] == theirs, f"{name} reorders Keras' arguments"


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_every_config_entry_is_a_named_parameter(name):
    cls = getattr(layers, name)
    _, _, make = COUNTERPARTS[name]
    base = set(keras.layers.Layer(name="x").get_config())
    hidden = set(make(cls).get_config()) - base - set(_named(cls))
    assert not hidden, f"{name} stores {sorted(hidden)} without naming them in its signature"

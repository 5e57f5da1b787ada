"""Making a trained Keras model Bayesian: `bayesianize`, with MOPED priors.

Krishnan, Subedar and Tickoo (2020, AAAI), "Specifying weight priors in
Bayesian deep neural networks with empirical Bayes" (MOPED), take the
weights w of a trained deterministic network as the prior means of a
Bayesian one and start its mean-field posterior at N(w, (delta |w|)^2).
bayesian-torch's `dnn_to_bnn` does the same swap in PyTorch; this is its
Keras 3 counterpart, built on `keras.models.clone_model`.
"""

import collections

import keras
import numpy as np

from tfp_bnn import _keras_internals
from tfp_bnn import _validation
from tfp_bnn import layers as bnn_layers
from tfp_bnn.posteriors import MeanFieldNormal
from tfp_bnn.priors import CenteredNormalPrior

METHODS = ("reparameterization", "flipout")

# The smallest posterior scale: a trained weight of exactly 0 would give
# delta * |w| = 0 and rho = -inf; bayesian-torch's get_rho adds the same 1e-20.
_MIN_SCALE = 1e-20

Conversion = collections.namedtuple("Conversion", ["reparameterization", "flipout", "kernel"])
Conversion.__doc__ = """A convertible Keras layer's variational counterparts.

`reparameterization` and `flipout` are the tfp_bnn classes it becomes (they
take the Keras layer's config; None where there is none), `kernel` the
attribute holding its weight matrix; a `bias`, when `use_bias`, is converted
too. A new entry here is all a new convertible class needs.
"""

# Exact classes only: a subclass may change `call`, which the copy would lose.
CONVERSIONS = {
    keras.layers.Dense: Conversion(bnn_layers.DenseReparameterization,
                                   bnn_layers.DenseFlipout, "kernel"),
    keras.layers.Conv1D: Conversion(bnn_layers.Conv1DReparameterization,
                                    bnn_layers.Conv1DFlipout, "kernel"),
    keras.layers.Conv2D: Conversion(bnn_layers.Conv2DReparameterization,
                                    bnn_layers.Conv2DFlipout, "kernel"),
    keras.layers.Conv3D: Conversion(bnn_layers.Conv3DReparameterization,
                                    bnn_layers.Conv3DFlipout, "kernel"),
    keras.layers.Embedding: Conversion(bnn_layers.EmbeddingReparameterization, None,
                                       "embeddings"),
}

# Config entries of the Keras layers that the variational layers do not take,
# with the value a plain layer has; any other value is refused.
_PLAIN = {"lora_rank": None, "lora_alpha": None, "quantization_config": None}


def _convertible_names():
    return ", ".join(cls.__name__ for cls in CONVERSIONS)


def _is_graph_model(layer):
    """Sequential or functional: the models `clone_model` rewires layer by layer."""
    return isinstance(layer, (keras.Sequential, _keras_internals.Functional))


def _leaf_layers(model):
    """The layers of `model` and of its nested graph models, in call order, each once."""
    seen, leaves = set(), []

    def walk(graph):
        for layer in graph.layers:
            if _is_graph_model(layer):
                walk(layer)
            elif id(layer) not in seen:
                seen.add(id(layer))
                leaves.append(layer)

    walk(model)
    return leaves


def _refusal(layer):
    """Why `layer` cannot be converted, or None when it can."""
    if type(layer) not in CONVERSIONS:
        return (f"layer '{layer.name}' ({type(layer).__name__}) cannot be converted: "
                f"bayesianize converts exactly {_convertible_names()} (not subclasses).")
    if getattr(layer, "quantization_mode", None):
        return (f"layer '{layer.name}' is quantized ({layer.quantization_mode}); "
                "bayesianize converts float layers only.")
    config = layer.get_config()
    for key, plain in _PLAIN.items():
        if config.get(key, plain) != plain:
            return (f"layer '{layer.name}' has {key}={config[key]!r}; bayesianize converts "
                    f"plain layers only ({key}={plain!r}).")
    return None


def _chosen(model, layers):
    """The layers of `model` that `layers` selects, checked; one-line errors otherwise."""
    leaves = _leaf_layers(model)
    convertible = [layer for layer in leaves if _refusal(layer) is None]
    if not convertible:
        raise ValueError(f"model '{model.name}' has no layer bayesianize can convert "
                         f"(it converts {_convertible_names()}).")
    if isinstance(layers, str) and layers == "all":
        return convertible
    if isinstance(layers, (int, np.integer)) and not isinstance(layers, bool):
        count = _validation.integer("layers", layers)
        if count > len(convertible):
            raise ValueError(f"`layers`={count} asks for the last {count} convertible layers "
                             f"but model '{model.name}' has {len(convertible)}.")
        return convertible[-count:]
    items = [layers] if isinstance(layers, (str, type)) else layers
    if not isinstance(items, (list, tuple)) or not items or not all(
            isinstance(item, (str, type)) for item in items):
        raise ValueError("`layers` must be 'all', an int k (the last k convertible layers), or "
                         f"a list of layer names or layer classes, got {layers!r}.")
    names = [item for item in items if isinstance(item, str)]
    if names:
        _validation.subset("layers", names, [layer.name for layer in leaves])
    for cls in (item for item in items if isinstance(item, type)):
        if cls not in CONVERSIONS:
            raise ValueError(f"`layers` lists the class {cls.__name__}, which bayesianize "
                             f"cannot convert; it converts {_convertible_names()}.")
    chosen = []
    for layer in leaves:
        if layer.name in names or type(layer) in items:
            reason = _refusal(layer)
            if reason is not None and layer.name in names:
                raise ValueError(reason)
            if reason is None:
                chosen.append(layer)
    if not chosen:
        raise ValueError(f"`layers`={layers!r} selects no layer of model '{model.name}'.")
    return chosen


def _variational_copy(layer, conversion, method, prior_scale, kl_weight, seed):
    """The variational layer with `layer`'s configuration (weights are set later)."""
    config = layer.get_config()
    for key in _PLAIN:
        config.pop(key, None)
    config.update(posterior=MeanFieldNormal(), prior=CenteredNormalPrior(prior_scale),
                  kl_weight=kl_weight, bayesian_bias=True, seed=seed)
    return getattr(conversion, method).from_config(config)


def _softplus_inverse(scale):
    """rho with softplus(rho) = scale, stable for small and large scales (float64)."""
    scale = np.maximum(np.asarray(scale, np.float64), _MIN_SCALE)
    return scale + np.log(-np.expm1(-scale))


def _set_moped(params, prior, weights, delta):
    """q = N(w, (delta |w|)^2) through rho = softplus^-1(delta |w|); prior centred on w."""
    loc, rho = params
    loc.assign(weights.astype(loc.dtype))
    rho.assign(_softplus_inverse(delta * np.abs(weights)).astype(rho.dtype))
    prior.loc.assign(weights.astype(prior.loc.dtype))


def _transfer(old, new, converted, delta):
    """Copies `old`'s trained weights into its copy `new` (MOPED when converted)."""
    if not converted:
        new.set_weights(old.get_weights())
        return
    conversion = CONVERSIONS[type(old)]
    kernel = keras.ops.convert_to_numpy(getattr(old, conversion.kernel))
    _set_moped(new.kernel_params, new._kernel_prior_built, kernel, delta)
    if getattr(old, "use_bias", False):
        bias = keras.ops.convert_to_numpy(old.bias)
        _set_moped(new.bias_params, new._bias_prior_built, bias, delta)


def bayesianize(model, layers="all", method="reparameterization", delta=0.1, prior_scale=1.0,
                kl_weight=None, seed=None):
    """A new model in which the chosen layers of a trained `model` are variational.

    Each chosen `keras.layers.Dense` / `Conv1D` / `Conv2D` / `Conv3D` / `Embedding` becomes
    its tfp_bnn counterpart (`DenseReparameterization` or `DenseFlipout`,
    `Conv2DReparameterization`, ...) with the same configuration (units or
    filters, kernel size, strides, padding, dilation, data format, groups,
    activation, use_bias, initializers, regularizers, constraints, dtype,
    name) and MOPED weights (Krishnan, Subedar and Tickoo, 2020, AAAI):

        q(w) = N(w_trained, (delta |w_trained|)^2) at the start,
               rho = softplus^-1(max(delta |w_trained|, 1e-20)),
        p(w) = N(w_trained, prior_scale^2), the centre fixed (non-trainable),

    for the kernel and the bias alike, each weight on its own. This is the
    variant of the authors' `MOPED_layer` in bayesian-torch's examples
    (prior mean = trained weights, prior scale a constant, 1.0 there);
    bayesian-torch's `dnn_to_bnn(moped_enable=True)` sets the same posterior
    but leaves its prior at N(prior_mu, prior_sigma) - here the prior is
    centred, as in the paper. Deviation: the 1e-20 floor of the scale is a
    max() where bayesian-torch adds 1e-20 inside its softplus inverse.

    Every other layer is copied with its weights; shared layers stay one
    shared layer (converted once), nested Sequential and functional models
    are rewired recursively, and masks pass through the converted Dense
    layers as through Keras'. The input model is not modified. With the
    posteriors at their means (`tfp_bnn.set_mean_mode`) the new model
    predicts what `model` predicts.

    Args:
        model: a built Sequential or functional `keras.Model`.
        layers: "all" (every convertible layer), an int k (the last k
            convertible layers in call order), or a list of layer names
            and/or layer classes (exact classes; a LoRA or quantized layer of
            a listed class is left as it is). A layer named that cannot be
            converted (another class, a subclass, a LoRA or quantized
            layer) is an error. Layers inside wrappers (`TimeDistributed`,
            `Bidirectional`) or subclassed models are copied unchanged.
        method: "reparameterization" (one kernel sample per call) or
            "flipout" (decorrelated per-example noise, Wen et al. 2018).
        delta: > 0, the initial posterior scale relative to |w|.
        prior_scale: > 0, the prior standard deviation around the trained
            weights.
        kl_weight: the layers' KL weight (1/N for N training examples), or
            None to let `tfp_bnn.callbacks.KLScheduler` set it.
        seed: int or None; the i-th converted layer gets seed + 10 i.

    Returns:
        A new `keras.Model` of the same kind (compiled as `model` was).

    Example:
    >>> x = np.random.rand(32, 4).astype("float32")
    >>> y = (x.sum(axis=1) > 2).astype("int32")
    >>> trained = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
    ...                             keras.layers.Dense(2, activation="softmax")])
    >>> trained.compile("adam", "sparse_categorical_crossentropy")
    >>> bnn = tfp_bnn.bayesianize(trained, method="flipout", delta=0.1)
    >>> [type(layer).__name__ for layer in bnn.layers]
    ['DenseFlipout', 'DenseFlipout']
    >>> with tfp_bnn.mean_mode(bnn):   # posterior means = the trained weights
    ...     print(np.allclose(bnn(x), trained(x), atol=1e-6))
    True
    >>> history = bnn.fit(x, y, epochs=1, verbose=0,
    ...                   callbacks=[tfp_bnn.callbacks.KLScheduler(num_examples=len(x))])
    """
    if not isinstance(model, keras.Model) or not _is_graph_model(model):
        raise ValueError("`model` must be a Sequential or functional keras.Model (a subclassed "
                         f"model cannot be rewired layer by layer), got {type(model).__name__}.")
    if not model.built:
        raise ValueError(f"`model` '{model.name}' is not built: call it once or give it a "
                         "keras.Input so its trained weights exist.")
    _validation.one_of("method", method, METHODS)
    delta = _validation.positive("delta", delta)
    prior_scale = _validation.positive("prior_scale", prior_scale)
    kl_weight = _validation.number("kl_weight", kl_weight, low=0.0, allow_none=True)
    seed = _validation.seed(seed, allow_none=True)
    chosen_layers = _chosen(model, layers)
    for layer in chosen_layers:
        if getattr(CONVERSIONS[type(layer)], method) is None:
            raise ValueError(f"layer '{layer.name}' ({type(layer).__name__}) has no {method} "
                             "counterpart; choose another `method` or leave it out of `layers`.")
    chosen = {id(layer): index for index, layer in enumerate(chosen_layers)}
    pairs = []

    def clone(layer):
        if id(layer) in chosen:
            layer_seed = None if seed is None else seed + 10 * chosen[id(layer)]
            new = _variational_copy(layer, CONVERSIONS[type(layer)], method, prior_scale,
                                    kl_weight, layer_seed)
        else:
            new = type(layer).from_config(layer.get_config())
        pairs.append((layer, new, id(layer) in chosen))
        return new

    # clone_model calls `clone` once per layer (its cache keeps shared layers
    # shared) and builds every copy by calling it on symbolic inputs.
    result = keras.models.clone_model(model, clone_function=clone, recursive=True)
    for old, new, converted in pairs:
        _transfer(old, new, converted, delta)
    return result

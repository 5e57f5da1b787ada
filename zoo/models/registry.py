"""The registry of ready models: names, what each is, and which paper it follows.

Example:
>>> import zoo
>>> zoo.list_models()[:3]
['bayesian_lstm_forecaster', 'bayesian_transformer', 'bbb_mlp']
>>> model = zoo.build_model("flipout_mlp", input_shape=(8,), num_train=927)
>>> model = zoo.build_model("flipout_lenet", (8, 8, 1), task="classification",
...                         num_classes=10, num_train=1438)
"""

import dataclasses
import difflib
import functools
import inspect

from zoo.models import _common
from zoo.models.bbb import bbb_mlp
from zoo.models.dvi import dvi_mlp
from zoo.models.ensemble import deep_ensemble
from zoo.models.flipout import flipout_lenet
from zoo.models.flipout import flipout_mlp
from zoo.models.lstm import bayesian_lstm_forecaster
from zoo.models.mc_dropout import mc_dropout_mlp
from zoo.models.node_bnn import node_bnn_mlp_flow
from zoo.models.transformer import bayesian_transformer


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One ready model.

    Attributes:
        name: registry name.
        builder: callable(input_shape, task, num_classes, num_train, seed,
            **overrides) -> compiled keras.Model.
        tasks: the tasks it supports ("regression", "classification").
        inputs: the input layouts it reads ("table", "image", "sequence").
        summary: one line for `python -m zoo list`.
        paper: the paper its defaults follow.
        sampling_free: True when, with its defaults, one deterministic pass gives the
            predictive distribution (no Monte Carlo needed).

    Args:
        name: the `name` attribute.
        builder: the `builder` attribute.
        tasks: the `tasks` attribute.
        inputs: the `inputs` attribute.
        summary: the `summary` attribute.
        paper: the `paper` attribute.
        sampling_free: the `sampling_free` attribute (default False).

    Example:
    >>> import zoo
    >>> spec = zoo.get_spec("dvi_mlp")
    >>> spec.tasks, spec.sampling_free
    (('regression',), True)
    """

    name: str
    builder: object
    tasks: tuple
    inputs: tuple
    summary: str
    paper: str
    sampling_free: bool = False

    def check_overrides(self, overrides):
        """Raises ValueError unless `overrides` are builder arguments of this model.

        The arguments `build_model` sets itself (input_shape, task, num_classes,
        num_train, seed) and those its variant fixes (heteroscedastic, a
        node_bnn's posterior) are not overrides; the message lists the accepted
        ones. Values are the builder's to check.

        Args:
            overrides: dict of builder keyword arguments.
        """
        accepted = set(inspect.signature(self.builder).parameters) - {
            "input_shape", "task", "num_classes", "num_train", "seed", "heteroscedastic",
            *getattr(self.builder, "keywords", {})}
        unknown = sorted(set(overrides) - accepted)
        if unknown:
            raise ValueError(f"Model {self.name!r} has no argument {unknown[0]!r}; its "
                             f"arguments: {sorted(accepted)}.")


_ALL_INPUTS = ("table", "image", "sequence")
_BOTH = ("regression", "classification")


def get_spec(name) -> ModelSpec:
    """The `ModelSpec` registered under `name`.

    Args:
        name: a name from `list_models()`.

    Returns:
        The `ModelSpec`.

    Raises:
        ValueError: for an unknown name, listing the known ones.

    Example:
    >>> import zoo
    >>> zoo.get_spec("flipout_mlp").inputs
    ('table', 'image', 'sequence')
    """
    if not isinstance(name, str) or name not in SPECS:
        close = difflib.get_close_matches(name, SPECS, n=1) if isinstance(name, str) else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"Unknown model {name!r}; available: {list_models()}.{hint}")
    return SPECS[name]


def _plain(function):
    return functools.partial(function, heteroscedastic=False)


def _with_heteroscedastic(name, builder, kind, summary, paper, heteroscedastic_paper):
    """The MLP `name` for both tasks, and `name`_heteroscedastic predicting s(x)."""
    return (ModelSpec(name, _plain(builder), _BOTH, _ALL_INPUTS, summary, paper),
            ModelSpec(f"{name}_heteroscedastic",
                      functools.partial(builder, heteroscedastic=True), ("regression",),
                      _ALL_INPUTS, f"{kind} predicting its noise variance per input",
                      heteroscedastic_paper))


_SPECS = (
    *_with_heteroscedastic(
        "bbb_mlp", bbb_mlp, "Bayes by Backprop MLP",
        "Bayes by Backprop MLP, scale-mixture prior, learned noise",
        "Blundell et al. 2015, Weight Uncertainty in Neural Networks (ICML)",
        "Blundell et al. 2015; Kendall and Gal 2017 (NeurIPS)"),
    *_with_heteroscedastic(
        "flipout_mlp", flipout_mlp, "Flipout MLP",
        "Flipout MLP, N(0, 1) prior, closed-form KL, learned noise",
        "Wen et al. 2018, Flipout (ICLR)", "Wen et al. 2018; Kendall and Gal 2017"),
    *_with_heteroscedastic(
        "mc_dropout_mlp", mc_dropout_mlp, "MC dropout MLP",
        "MC dropout MLP (p = 0.05, l = 0.01), learned noise",
        "Gal and Ghahramani 2016, Dropout as a Bayesian Approximation (ICML)",
        "Gal and Ghahramani 2016; Kendall and Gal 2017"),
    ModelSpec("flipout_lenet", _plain(flipout_lenet), _BOTH, ("image",),
              "LeNet-5 CNN with Flipout in every layer",
              "LeCun et al. 1998 (LeNet-5); Wen et al. 2018"),
    ModelSpec("node_bnn", node_bnn_mlp_flow, _BOTH, _ALL_INPUTS,
              "node-based BNN MLP, planar-flow node posteriors (K = 4)",
              "Trinh et al. 2022, Tackling covariate shift with node-based BNNs (ICML)"),
    ModelSpec("bayesian_transformer", bayesian_transformer, ("regression",),
              ("table", "sequence"),
              "Bayesian transformer block trained by moment propagation (no sampling)",
              "Vaswani et al. 2017 (transformer); moment propagation as in Wu et al. "
              "2019, Deterministic Variational Inference for Robust BNNs (ICLR)",
              sampling_free=True),
    ModelSpec("bayesian_lstm_forecaster", bayesian_lstm_forecaster, ("regression",),
              ("sequence",),
              "Bayesian LSTM forecaster, weights drawn once per sequence, learned noise",
              "Fortunato et al. 2017, Bayesian Recurrent Neural Networks (arXiv:1704.02798)"),
    ModelSpec("dvi_mlp", dvi_mlp, ("regression",), _ALL_INPUTS,
              "MLP trained by moment propagation (no sampling), heteroscedastic",
              "Wu et al. 2019, Deterministic Variational Inference for Robust BNNs (ICLR)",
              sampling_free=True),
    # Its members may be registry models: the registry hands it `get_spec` (no import back).
    ModelSpec("deep_ensemble", functools.partial(deep_ensemble, spec_of=get_spec), _BOTH,
              _ALL_INPUTS,
              "deep ensemble of M = 5 MLPs (heteroscedastic for regression), one fit",
              "Lakshminarayanan et al. 2017, Simple and Scalable Predictive Uncertainty "
              "Estimation using Deep Ensembles (NeurIPS)"),
)
SPECS = {spec.name: spec for spec in _SPECS}
MODELS = {spec.name: spec.builder for spec in _SPECS}


def list_models():
    """Names of the registered models, sorted.

    Returns:
        A list of str.

    Example:
    >>> import zoo
    >>> "flipout_mlp" in zoo.list_models()
    True
    """
    return sorted(SPECS)


def get_model(name):
    """The builder function registered under `name` (see `build_model`).

    Args:
        name: a name from `list_models()`.

    Returns:
        The builder, a callable(input_shape, task, num_classes, num_train,
        seed, **overrides) returning a compiled `keras.Model`.

    Example:
    >>> import zoo
    >>> model = zoo.get_model("mc_dropout_mlp")((4,), num_train=100, hidden_units=(8,))
    >>> model.output.shape   # [mean, log variance]
    (None, 2)
    """
    return get_spec(name).builder


def check_overrides(name, overrides):
    """Raises ValueError unless `overrides` are builder arguments of model `name`
    (`ModelSpec.check_overrides`)."""
    get_spec(name).check_overrides(overrides)


def build_model(name, input_shape, task="regression", num_classes=None, num_train=None,
                seed=0, **overrides):
    """Builds and compiles the ready model `name` for one input shape and task.

    Args:
        name: a name from `list_models()`.
        input_shape: shape of one example, e.g. (8,) or (8, 8, 1).
        task: "regression" (outputs [mean, log variance] of a standardised
            target) or "classification" (logits).
        num_classes: number of classes, for classification.
        num_train: N, the training-set size (kl_weight = 1/N).
        seed: int >= 0: initial weights and weight noise.
        **overrides: builder arguments (hidden_units, learning_rate,
            decay_steps, rate, ...); see the builder's family in `zoo.models`.

    Returns:
        A compiled `keras.Model`.

    Raises:
        ValueError: unknown model (listing the known ones), unknown task or
            one the model does not support, or an override the builder does
            not take; the builders name any invalid value.

    Example:
    >>> import zoo
    >>> model = zoo.build_model("flipout_mlp", input_shape=(8,), num_train=927,
    ...                         hidden_units=(16,))
    >>> model(np.zeros((2, 8), "float32")).shape   # [mean, log variance]
    TensorShape([2, 2])
    """
    spec = get_spec(name)
    if task not in _common.TASKS:
        raise ValueError(f"Unknown task {task!r}; `task` must be one of "
                         f"{list(_common.TASKS)}.")
    if task not in spec.tasks:
        raise ValueError(f"Model {name!r} does not support task {task!r}; it supports "
                         f"{list(spec.tasks)}.")
    check_overrides(name, overrides)
    return spec.builder(input_shape, task=task, num_classes=num_classes, num_train=num_train,
                        seed=seed, **overrides)

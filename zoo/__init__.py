"""Ready models, their registry, and the command line (`python -m zoo`).

`build_model(name, input_shape, task, ...)` returns a compiled Keras model;
`list_models()` names them; `MODELS` maps names to builders; `auto(x, y, ...)` chooses,
refits and scores a regression model on a table (`zoo.run.auto`). The CLI
(`python -m zoo list | train | evaluate | benchmark`) is in `zoo.cli`.

The names below load `zoo.models.registry` (and TensorFlow) on first use, so that
`python -m zoo` can read its arguments, and refuse bad ones, before
TensorFlow starts.

Example:
>>> import zoo
>>> model = zoo.build_model("mc_dropout_mlp", input_shape=(8,), num_train=927)
>>> model.output.shape   # [mean, log variance] of a standardised target
(None, 2)
"""

import importlib

__all__ = ["MODELS", "ModelSpec", "SPECS", "auto", "build_model", "get_model", "get_spec",
           "list_models"]


def __getattr__(name):
    if name in __all__:
        module = "zoo.run.auto" if name == "auto" else "zoo.models.registry"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

"""Ready models, their registry, and the command line (`python -m zoo`).

`build_model(name, input_shape, task, ...)` returns a compiled Keras model;
`list_models()` names them; `MODELS` maps names to builders. The CLI
(`python -m zoo list | train | evaluate | benchmark`) is in `zoo.cli`.

Example:
>>> import zoo
>>> model = zoo.build_model("mc_dropout_mlp", input_shape=(8,), num_train=927)
"""

from zoo.registry import MODELS
from zoo.registry import SPECS
from zoo.registry import ModelSpec
from zoo.registry import build_model
from zoo.registry import get_model
from zoo.registry import get_spec
from zoo.registry import list_models

__all__ = ["MODELS", "ModelSpec", "SPECS", "build_model", "get_model", "get_spec",
           "list_models"]
